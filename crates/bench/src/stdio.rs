//! A JSON-RPC client over a child's stdin/stdout, hand-written rather than
//! rmcp's so that it stays much cheaper than the server it drives: one
//! writer task batches request lines into few writes, one reader task parses
//! each reply once and hands it to the waiting caller by id (notifications
//! from the server are skipped). Any number of callers may share the
//! connection, each with its own request in flight.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter},
    process::{Child, ChildStdin, ChildStdout},
    sync::{mpsc, oneshot},
    task::JoinHandle,
};

use crate::rpc::{self, Reply, Session};

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>;

/// A handle on the connection; clone it for each concurrent caller.
#[derive(Clone)]
pub struct StdioClient {
    next_id: Arc<AtomicU64>,
    pending: Pending,
    lines: mpsc::UnboundedSender<String>,
}

/// The connection itself: closing it closes the server's stdin.
pub struct StdioConnection {
    pub client: StdioClient,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl StdioConnection {
    /// Takes over `child`'s stdin and stdout and runs the MCP handshake.
    pub async fn open(child: &mut Child) -> anyhow::Result<Self> {
        let stdin = child.stdin.take().context("stdin is piped")?;
        let stdout = child.stdout.take().context("stdout is piped")?;
        let (lines, to_write) = mpsc::unbounded_channel();
        let pending = Pending::default();
        let connection = Self {
            client: StdioClient {
                next_id: Arc::new(AtomicU64::new(1)),
                pending: pending.clone(),
                lines,
            },
            writer: tokio::spawn(write_lines(stdin, to_write)),
            reader: tokio::spawn(read_replies(stdout, pending)),
        };
        let mut client = connection.client.clone();
        client
            .request("initialize", &rpc::initialize_params())
            .await?
            .ok()
            .context("initialize")?;
        client.notify(rpc::INITIALIZED)?;
        Ok(connection)
    }

    /// Closes the server's stdin (once every clone of the client is gone)
    /// and waits (up to 10 s) until the server has closed its stdout.
    pub async fn close(self) -> anyhow::Result<()> {
        drop(self.client);
        let closed = async {
            self.writer.await?;
            self.reader.await
        };
        tokio::time::timeout(Duration::from_secs(10), closed)
            .await
            .context("switchboard kept stdout open for 10 s after its stdin closed")??;
        Ok(())
    }
}

impl StdioClient {
    fn notify(&self, line: &str) -> anyhow::Result<()> {
        self.lines
            .send(line.to_owned())
            .ok()
            .context("the connection to switchboard is closed")
    }
}

impl Session for StdioClient {
    async fn request(&mut self, method: &str, params: &Value) -> anyhow::Result<Reply> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(id, tx);
        self.notify(&rpc::request(id, method, params))?;
        rx.await
            .ok()
            .with_context(|| format!("switchboard closed stdout before answering {method}"))
    }
}

async fn write_lines(stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<String>) {
    let mut stdin = BufWriter::with_capacity(64 * 1024, stdin);
    while let Some(line) = lines.recv().await {
        let mut next = Some(line);
        // Write whatever else is queued before one flush.
        while let Some(line) = next {
            if stdin.write_all(line.as_bytes()).await.is_err()
                || stdin.write_all(b"\n").await.is_err()
            {
                return;
            }
            next = lines.try_recv().ok();
        }
        if stdin.flush().await.is_err() {
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

async fn read_replies(stdout: ChildStdout, pending: Pending) {
    if let Err(e) = route_replies(stdout, &pending).await {
        eprintln!("switchboard-bench: stdio client: {e:#}");
    }
    // Callers still waiting see their reply channel close.
    pending.lock().expect("pending lock").clear();
}

async fn route_replies(stdout: ChildStdout, pending: &Pending) -> anyhow::Result<()> {
    let mut lines = BufReader::with_capacity(256 * 1024, stdout).lines();
    while let Some(line) = lines.next_line().await? {
        let reply = Reply::parse(line)?;
        if reply.notification {
            continue;
        }
        let Some(id) = reply.id else {
            bail!("a reply without an id: {:.300}", reply.text);
        };
        let waiter = pending.lock().expect("pending lock").remove(&id);
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(reply);
            }
            None => bail!("a reply to unknown request {id}"),
        }
    }
    Ok(())
}
