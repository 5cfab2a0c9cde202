//! A real S3-protocol server for the object storage tests: the `s3s-fs` crate's server
//! (S3's REST protocol over a folder: ranged GETs, multipart uploads, signatures
//! checked) on 127.0.0.1, started in process once per test binary, and the `AWS_*`
//! environment that points the `object_store` client at it. Not a mock of the client:
//! requests go over TCP, signed, as to any S3-compatible store.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The bucket the tests write to.
pub const BUCKET: &str = "tensorfmt";

/// The running server.
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The folder it serves (bucket folders inside).
    pub root: PathBuf,
}

impl Server {
    /// The `s3://` URL of `key` in the test bucket.
    pub fn url(&self, key: &str) -> String {
        format!("s3://{BUCKET}/{key}")
    }

    /// Where the server keeps the object `key` of the test bucket.
    pub fn file(&self, key: &str) -> PathBuf {
        self.root.join(BUCKET).join(key)
    }
}

/// The server of this process, started on first use, with the environment set.
pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(start)
}

/// The server folders' name prefix, followed by the serving process's id.
const ROOT_PREFIX: &str = "tensorfmt-s3-";

/// The folder this process's server serves.
static ROOT: OnceLock<PathBuf> = OnceLock::new();

/// Removes the folders of servers whose process is gone.
fn remove_stale_roots() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(ROOT_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn start() -> Server {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    remove_stale_roots();
    let root = tempfile::Builder::new()
        .prefix(&format!("{ROOT_PREFIX}{}-", std::process::id()))
        .tempdir()
        .expect("a folder for the S3 server")
        .keep();
    // The server lives as long as the process, so its folder is removed at exit (and,
    // after a test binary was killed, by the next one's `remove_stale_roots`).
    ROOT.set(root.clone()).expect("one S3 server per process");
    extern "C" fn remove_root() {
        if let Some(root) = ROOT.get() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
    // SAFETY: `remove_root` is a plain function that touches only `ROOT`, set above.
    unsafe { libc::atexit(remove_root) };
    std::fs::create_dir_all(root.join(BUCKET)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let served = root.clone();
    std::thread::Builder::new()
        .name("s3-server".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let fs = s3s_fs::FileSystem::new(&served).unwrap();
                let mut b = s3s::service::S3ServiceBuilder::new(fs);
                b.set_auth(s3s::auth::SimpleAuth::from_single(
                    "tensorfmt-key",
                    "tensorfmt-secret",
                ));
                let service = b.build();
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap().port()).unwrap();
                let http = Builder::new(TokioExecutor::new());
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        continue;
                    };
                    // Small writes go out at once (without, Nagle's algorithm meets the
                    // client's delayed ACKs and a response's tail waits ~40 ms).
                    let _ = socket.set_nodelay(true);
                    let conn = http
                        .serve_connection(TokioIo::new(socket), service.clone())
                        .into_owned();
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                }
            });
        })
        .unwrap();
    let port = rx.recv().expect("the S3 server's port");
    let endpoint = format!("http://127.0.0.1:{port}");
    for (k, v) in [
        ("AWS_ACCESS_KEY_ID", "tensorfmt-key"),
        ("AWS_SECRET_ACCESS_KEY", "tensorfmt-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false"),
    ] {
        std::env::set_var(k, v);
    }
    // No proxy between the client and the loopback.
    std::env::remove_var("HTTP_PROXY");
    std::env::remove_var("http_proxy");
    std::env::remove_var("ALL_PROXY");
    Server { endpoint, root }
}
