//! A real browser for the console's tests: Debian's `chromium`, headless,
//! driven over WebDriver (`chromedriver`, from `chromium-driver`) with
//! fantoccini. Both are installed by `./scripts/test`; a missing one is a
//! failure that says so, never a skip.
//!
//! Every wait polls with a generous deadline: the page draws when the
//! daemon answers, however loaded the machine is.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// How long any one thing may take to appear.
const PATIENCE: Duration = Duration::from_secs(90);

pub struct Browser {
    pub client: Client,
    driver: Child,
    profile: tempfile::TempDir,
    shots: PathBuf,
}

/// Where the screenshots of the views go (a test artifact: look at them).
pub fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    /// Starts chromedriver and a headless chromium `width`×`height`, in the
    /// dark colour scheme when `dark`.
    pub async fn start(width: u32, height: u32, dark: bool) -> Browser {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "chromedriver is needed (Debian's chromium-driver; ./scripts/test installs it)",
            );
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        if dark {
            args.push("--force-dark-mode".into());
            args.push("--blink-settings=preferredColorScheme=0".into());
        }
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = ClientBuilder::new(
            hyper_util::client::legacy::connect::HttpConnector::new(),
        )
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("chromedriver could not start chromium (Debian's chromium; ./scripts/test installs it)");
        Browser {
            client,
            driver,
            profile,
            shots: screenshot_dir(),
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The first element matching `css`, once there is one.
    pub async fn wait_for(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(PATIENCE)
            .every(Duration::from_millis(100))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css:?} appeared: {e}"))
    }

    /// Waits until an element matching `css` shows text containing `text`;
    /// returns that text. The page redraws as it learns, so each look
    /// finds the element afresh.
    pub async fn wait_text(&self, css: &str, text: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        let mut last = Vec::new();
        loop {
            last.clear();
            if let Ok(elements) = self.client.find_all(Locator::Css(css)).await {
                for element in elements {
                    if let Ok(shown) = element.text().await {
                        if shown.contains(text) {
                            return shown;
                        }
                        last.push(shown);
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {css:?} showed {text:?}; they showed: {last:?}\npage:\n{}",
                self.text_of("main").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the JavaScript expression `condition` is true on the page.
    pub async fn wait_until(&self, condition: &str) {
        let deadline = Instant::now() + PATIENCE;
        let script =
            format!("try {{ return Boolean({condition}); }} catch (e) {{ return false; }}");
        loop {
            if let Ok(serde_json::Value::Bool(true)) = self.client.execute(&script, vec![]).await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "never true: {condition}\npage:\n{}",
                self.text_of("main").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of the JavaScript expression `expr` on the page, as text
    /// (empty when it throws or is not a string).
    #[allow(dead_code)] // each test binary includes this file; not all of them read values
    pub async fn eval_text(&self, expr: &str) -> String {
        let script = format!("try {{ return String({expr} ?? ''); }} catch (e) {{ return ''; }}");
        match self.client.execute(&script, vec![]).await {
            Ok(serde_json::Value::String(text)) => text,
            _ => String::new(),
        }
    }

    /// Clicks the element matching `css` (found afresh if a redraw replaced it).
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let element = self.wait_for(css).await;
            match element.click().await {
                Ok(()) => return,
                Err(e) => {
                    assert!(Instant::now() < deadline, "cannot click {css:?}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Confirms the dialog every console action opens.
    pub async fn confirm(&self) {
        self.click("dialog[open] [data-action=confirm]").await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.wait_for(css).await;
        element.clear().await.unwrap();
        element.send_keys(text).await.unwrap();
    }

    pub async fn text_of(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Saves the whole page (up to 3000 px tall) as `<name>.png` in
    /// [`screenshot_dir`] and says where.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let (width, height) = self.client.get_window_size().await.unwrap();
        let page = self
            .client
            .execute("return document.documentElement.scrollHeight", vec![])
            .await
            .unwrap()
            .as_u64()
            .unwrap_or(height);
        let tall = page.clamp(height, 3000) as u32;
        self.client
            .set_window_size(width as u32, tall)
            .await
            .unwrap();
        let png = self.client.screenshot().await;
        self.client
            .set_window_size(width as u32, height as u32)
            .await
            .unwrap();
        let png = png.unwrap();
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
        path
    }

    pub async fn close(self) {
        let _ = self.client.clone().close().await;
        // Drop stops chromedriver and whatever chromium it left.
    }

    /// Kills the chromium this browser started, found by its profile
    /// directory: killing chromedriver alone (a test that failed before
    /// `close`) orphans chromium, and orphans pile up on a CI machine.
    fn kill_chromium(&self) {
        let profile = format!("--user-data-dir={}", self.profile.path().display());
        let _ = Command::new("pkill")
            .args(["-KILL", "-f", "--", &profile])
            .status();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        self.kill_chromium();
    }
}
