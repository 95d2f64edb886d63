// A form built from a tool's parameter schema (JSON Schema, as the model
// sees it): one labelled field per property — text, number, a checkbox, a
// list of choices for an `enum`, JSON for anything nested — filled with
// the call's arguments. `read()` gives the edited arguments back.

import { h, pretty } from "../dom.js";

let forms = 0;

/** `{element, read}` for `schema` filled with `values`; `read` throws with a message a person can act on. */
export function schemaForm(schema, values) {
  const props = schema && schema.type === "object" && schema.properties ? schema.properties : null;
  const id = `args-${++forms}`;
  if (!props) {
    const area = h("textarea", { id, rows: 5, class: "approval-args", "aria-label": "arguments (JSON)" }, pretty(values ?? {}));
    return { element: h("div", {}, h("label", { for: id }, "Arguments (JSON)"), area), read: () => JSON.parse(area.value) };
  }
  const required = new Set(schema.required || []);
  const fields = Object.entries(props).map(([name, spec]) => field(`${id}-${name}`, name, spec || {}, values?.[name], required.has(name)));
  const element = h("div", { class: "schema-form" }, fields.map((f) => f.element));
  const read = () => {
    const out = { ...(values || {}) };
    for (const f of fields) {
      const value = f.read();
      if (value === undefined) delete out[f.name];
      else out[f.name] = value;
    }
    return out;
  };
  return { element, read };
}

function field(id, name, spec, value, required) {
  const type = Array.isArray(spec.type) ? spec.type.find((t) => t !== "null") : spec.type;
  const label = h("label", { for: id }, name, required ? " (required)" : "", spec.description ? h("span", { class: "muted hint" }, ` — ${spec.description}`) : null);
  let input;
  let read;
  if (Array.isArray(spec.enum)) {
    input = h("select", { id, name }, spec.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
    if (value !== undefined) input.value = JSON.stringify(value);
    read = () => JSON.parse(input.value);
  } else if (type === "boolean") {
    input = h("input", { type: "checkbox", id, name, checked: Boolean(value) });
    read = () => input.checked;
  } else if (type === "number" || type === "integer") {
    input = h("input", { type: "number", id, name, step: type === "integer" ? "1" : "any", value: value ?? "" });
    read = () => {
      if (input.value === "") return undefined;
      const n = Number(input.value);
      if (Number.isNaN(n) || (type === "integer" && !Number.isInteger(n))) throw new Error(`${name} must be ${type === "integer" ? "a whole number" : "a number"}`);
      return n;
    };
  } else if (type === "string") {
    input = h("input", { type: "text", id, name, value: value ?? "" });
    read = () => (input.value === "" && value === undefined ? undefined : input.value);
  } else {
    input = h("textarea", { id, name, rows: 3, class: "approval-args" }, value === undefined ? "" : pretty(value));
    read = () => {
      if (input.value.trim() === "") return undefined;
      try {
        return JSON.parse(input.value);
      } catch (error) {
        throw new Error(`${name} is not JSON: ${error.message}`);
      }
    };
  }
  return { name, element: h("div", { class: "schema-field" }, label, input), read };
}
