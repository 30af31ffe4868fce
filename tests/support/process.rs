//! Real signals for tests that pause, resume and kill real processes.

use std::process::{Child, Command};

/// Sends `signal` (as kill(1) spells it: "-STOP", "-CONT", "-KILL", "-TERM") to `child`;
/// panics if it could not be delivered.
pub fn signal(child: &Child, signal: &str) {
    let ok = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {signal} {} failed", child.id());
}
