//! A real browser for tests and benchmarks: Debian's Chromium, headless,
//! driven over WebDriver by `chromedriver` on a free loopback port, with a
//! profile of its own that is removed afterwards.
//!
//! Missing binaries are a failure with what to install, never a skip.
//! Chromium runs with the flags this machine's closed network needs (no
//! background networking, no component updates), so it makes no connection
//! but the test's own.

use std::{
    net::TcpListener,
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use fantoccini::{
    Client, ClientBuilder,
    actions::{InputSource, KeyAction, KeyActions},
    wd::Capabilities,
};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How the browser's window is set up.
#[derive(Debug, Clone)]
pub struct BrowserOptions {
    pub width: u32,
    pub height: u32,
    /// `prefers-color-scheme: dark`.
    pub dark: bool,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        Self {
            width: 1280,
            height: 800,
            dark: false,
        }
    }
}

/// A headless Chromium and the chromedriver that drives it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a browser session with the default window.
    pub async fn start() -> Self {
        Self::start_with(BrowserOptions::default()).await
    }

    /// # Panics
    /// If Chromium or chromedriver is not installed, or does not start.
    pub async fn start_with(options: BrowserOptions) -> Self {
        for (binary, package) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: install Debian's {package} (apt-get install chromium chromium-driver)"
            );
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // A process group of its own: Chromium is chromedriver's child, and
        // the whole group goes when the browser does.
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "chromedriver did not listen on port {port} within 15 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let profile = tempfile::Builder::new()
            .prefix("switchboard-chromium-")
            .tempdir()
            .expect("a profile dir");
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            format!("--user-data-dir={}", profile.path().display()),
            format!("--window-size={},{}", options.width, options.height),
        ];
        if options.dark {
            args.push("--force-dark-mode".into());
            args.push("--blink-settings=preferredColorScheme=0".into());
        }
        let mut capabilities = Capabilities::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"binary": CHROMIUM, "args": args}),
        );
        let client = ClientBuilder::rustls()
            .expect("a TLS configuration")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session in Chromium");
        Self {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("the script failed: {e}\n{script}"))
    }

    /// Waits up to `limit` until `script` returns something truthy in the
    /// page; returns it.
    ///
    /// # Panics
    /// If it never does, saying what was awaited.
    pub async fn until(&self, what: &str, script: &str, limit: Duration) -> Value {
        let started = Instant::now();
        loop {
            let value = self.run(script, Vec::new()).await;
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return value;
            }
            assert!(
                started.elapsed() < limit,
                "waited {limit:?} for {what}; the page shows:\n{}",
                self.run("return document.body.innerText", Vec::new()).await
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Types `keys` (WebDriver key codes allowed: `\u{E007}` is Enter,
    /// `\u{E008}` Shift, `\u{E000}` releases the modifiers) into the element
    /// with id `id`.
    pub async fn keys(&self, id: &str, keys: &str) {
        let element = self
            .client
            .find(fantoccini::Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("no element #{id}: {e}"));
        element
            .send_keys(keys)
            .await
            .unwrap_or_else(|e| panic!("cannot type into #{id}: {e}"));
    }

    /// Presses and releases `key` (a character, or a WebDriver key code such
    /// as `\u{E004}`, Tab) on whatever has the focus, as a keyboard would.
    pub async fn press(&self, key: char) {
        let keys = KeyActions::new("keyboard".into())
            .then(KeyAction::Down { value: key })
            .then(KeyAction::Up { value: key });
        self.client
            .perform_actions(keys)
            .await
            .unwrap_or_else(|e| panic!("cannot press {key:?}: {e}"));
    }

    /// Clicks the first element `css` selects. A page that re-renders
    /// between finding and clicking (a stale element) is tried again.
    pub async fn click(&self, css: &str) {
        let mut tries = 0;
        loop {
            tries += 1;
            let outcome = match self.client.find(fantoccini::Locator::Css(css)).await {
                Ok(element) => element.click().await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(()) => return,
                Err(e) if tries < 20 && e.to_string().contains("stale") => {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(e) => panic!("cannot click {css}: {e}"),
            }
        }
    }

    /// Ends the session, then chromedriver and the browser.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group we created.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.wait();
    }
}
