// The token prompt: shown when the daemon answers 401. The token is kept in
// this tab's sessionStorage and sent as `Authorization: Bearer …`, as the
// CLI and every client send it.

import { h, fill, banner } from "../dom.js";

export function render(root, { rejected, message, done }) {
  const input = h("input", { type: "password", name: "token", id: "token", autocomplete: "off", required: true, autofocus: true });
  const form = h(
    "form",
    {
      class: "card narrow",
      onsubmit: (event) => {
        event.preventDefault();
        done(input.value.trim());
      },
    },
    h("h1", {}, "This daemon needs a token"),
    rejected ? banner("error", "The daemon refused the token: ", message) : null,
    h(
      "p",
      { class: "muted" },
      "Give the API token (the first line of ",
      h("code", {}, "server.token_file"),
      ", or the value of ",
      h("code", {}, "server.token_env"),
      "). It is kept in this tab only, until you close it.",
    ),
    h("label", { for: "token" }, "Token"),
    input,
    h("div", { class: "buttons" }, h("button", { type: "submit", class: "primary" }, "Continue")),
  );
  fill(root, form);
  input.focus();
}
