//! Threads that ONNX Runtime, HF tokenizers (rayon) and the engine start must never receive
//! PostgreSQL's signals: the backend's handlers (SIGINT cancel, SIGTERM die, SIGUSR1 latch and
//! procsignal, SIGALRM timeouts) assume they run on the backend's own thread. A new thread
//! inherits its creator's signal mask, so every place that may start threads runs with all
//! signals blocked on the calling thread, and unblocks them afterwards: signals that arrive
//! meanwhile stay pending and are delivered to the backend's thread when it unblocks.
//! (pthread_sigmask(3): "A new thread inherits a copy of its creator's signal mask".)

/// Runs `f` with every signal blocked on the calling thread, restoring the mask afterwards
/// (also when `f` panics).
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: restores the mask saved below.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        }
    }
    // SAFETY: sigfillset initialises `all`; pthread_sigmask writes the old mask into `old`.
    let _restore = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        Restore(old)
    };
    f()
}

/// Starts HF tokenizers' thread pool (rayon's global pool) now, with signals blocked, rather
/// than lazily on the first parallel encode on whatever thread makes it.
pub fn start_tokenizer_pool() {
    with_signals_blocked(|| {
        rayon::current_num_threads();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_on_this_thread(sig: libc::c_int) -> bool {
        // SAFETY: reads this thread's mask.
        unsafe {
            let mut cur: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
            libc::sigismember(&cur, sig) == 1
        }
    }

    #[test]
    fn threads_started_inside_inherit_the_blocked_mask_and_the_caller_gets_its_mask_back() {
        assert!(
            !blocked_on_this_thread(libc::SIGUSR2),
            "test thread starts with SIGUSR2 unblocked"
        );
        let child = with_signals_blocked(|| {
            std::thread::spawn(|| {
                [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGALRM]
                    .map(blocked_on_this_thread)
            })
        });
        assert_eq!(child.join().unwrap(), [true; 4]);
        assert!(!blocked_on_this_thread(libc::SIGUSR2), "mask restored");
    }
}
