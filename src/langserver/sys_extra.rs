//! The libc calls this module needs that `crate::sys` does not have yet. Kept apart so they
//! can move into src/sys.rs at merge (that file is being refactored in parallel).

/// Makes the child receive SIGKILL when the thread that spawned it ends, which includes ccide
/// dying by SIGKILL, where no cleanup code runs. prctl(2): the "parent" is the spawning
/// *thread*, so the caller must spawn from a thread that lives as long as the child.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid is async-signal-safe and called before fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between fork and prctl: the signal was never armed.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "ccide exited while starting the server",
                ));
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_child_dies_with_the_thread_that_spawned_it() {
        let child = std::thread::spawn(|| {
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("100");
            super::die_with_parent(&mut cmd);
            cmd.spawn().unwrap().id()
        })
        .join()
        .unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // Killed, then a zombie until this process reaps it (dropping `Child` never does).
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            if stat.is_empty()
                || stat[stat.rfind(')').unwrap() + 1..]
                    .trim_start()
                    .starts_with('Z')
            {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "sleep {child} outlived its thread"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
