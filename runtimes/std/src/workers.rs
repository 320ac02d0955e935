//! The driver's worker threads: a job (a model stream, a tool body, a side
//! call) goes to an idle worker, or to a new thread when none is idle, so a
//! step does not pay for starting threads. Jobs run at once, never queue
//! behind each other: there are as many workers as jobs ever ran at the
//! same time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

/// The worker threads of one agent.
pub(crate) struct Workers {
    tx: Option<Sender<Job>>,
    rx: Arc<Mutex<Receiver<Job>>>,
    /// Workers waiting for a job and not yet promised one.
    idle: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Workers {
            tx: Some(tx),
            rx: Arc::new(Mutex::new(rx)),
            idle: Arc::new(AtomicUsize::new(0)),
            threads: Vec::new(),
        }
    }

    /// Runs `body` on an idle worker, or on a new thread named `name`.
    pub(crate) fn run(
        &mut self,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let promised = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if promised && let Some(tx) = &self.tx {
            // An idle worker is promised to this job: it is in (or on its
            // way to) `recv`, so the job starts at once.
            match tx.send(Box::new(body)) {
                Ok(()) => return Ok(()),
                Err(mpsc::SendError(job)) => return self.start(name, job),
            }
        }
        self.start(name, Box::new(body))
    }

    fn start(&mut self, name: String, first: Job) -> std::io::Result<()> {
        let rx = self.rx.clone();
        let idle = self.idle.clone();
        let h = std::thread::Builder::new().name(name).spawn(move || {
            let mut job = Some(first);
            while let Some(run) = job.take() {
                run();
                idle.fetch_add(1, Ordering::AcqRel);
                let next = match rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => break,
                };
                job = next.ok();
            }
        })?;
        self.threads.retain(|t| !t.is_finished());
        self.threads.push(h);
        Ok(())
    }

    /// Lets every worker end after its job and waits for them.
    pub(crate) fn join(&mut self) {
        self.tx = None;
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}
