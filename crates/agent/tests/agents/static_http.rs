//! A real HTTP server (Python's `http.server`) serving the files of a
//! directory on loopback: a scrape target whose answer a test controls.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The server; stopped when dropped.
pub struct StaticHttp {
    child: Child,
    /// The port it listens on.
    pub port: u16,
}

impl StaticHttp {
    /// Serves `dir` on a free loopback port; waits until it listens.
    pub fn start(dir: &Path) -> Result<StaticHttp> {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("python3 -m http.server")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("the HTTP server did not listen on {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(StaticHttp { child, port })
    }
}

impl Drop for StaticHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
