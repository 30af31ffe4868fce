//! The `outbox-dispatcher` binary. Until the daemon lands it only explains that it is absent.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("{}", outbox_dispatcher::NOT_YET);
    ExitCode::from(1)
}
