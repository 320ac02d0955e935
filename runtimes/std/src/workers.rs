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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    #[test]
    fn an_idle_worker_takes_the_next_job() {
        let mut w = Workers::new();
        let (tx, rx) = channel();
        let t = tx.clone();
        w.run("a".into(), move || {
            t.send(std::thread::current().id()).unwrap()
        })
        .unwrap();
        let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // Wait until the worker is idle again.
        while w.idle.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        w.run("b".into(), move || {
            tx.send(std::thread::current().id()).unwrap()
        })
        .unwrap();
        let second = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(first, second, "the thread was reused");
        assert_eq!(w.threads.len(), 1);
        w.join();
    }

    #[test]
    fn jobs_never_wait_for_each_other() {
        // Three jobs that each wait for the others: they only finish if
        // all three run at the same time.
        let mut w = Workers::new();
        let barrier = Arc::new(Barrier::new(3));
        let (tx, rx) = channel();
        for i in 0..3 {
            let (b, tx) = (barrier.clone(), tx.clone());
            w.run(format!("j{i}"), move || {
                b.wait();
                tx.send(i).unwrap();
            })
            .unwrap();
        }
        for _ in 0..3 {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        w.join();
        assert!(w.threads.is_empty());
    }
}
