//! The SQLite database file's permissions: SQLite has no roles, so whoever can read the file
//! reads every op's body and headers. A new file is made its owner's alone; an existing file
//! that any user can read or write is reported.

use std::path::Path;

/// Creates `path` empty and readable and writable by its owner only (0600) when it does not
/// exist yet; SQLite gives the `-wal` and `-shm` files it adds the database file's permissions.
/// An existing file is left as its owner set it (a group shared by the producers and the
/// dispatcher is a choice), with a warning when every user may read or write it. A missing
/// folder or a refused permission is left to the connection, which reports it with its cause.
pub(crate) fn prepare(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        if matches!(&created, Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists)
            && let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o006 != 0
        {
            tracing::warn!(
                path = %path.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "every user of this host can read or write the SQLite outbox file, and with it \
                 every op's body and headers: make it 0600 (or 0660 for a group), docs/security.md"
            );
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}
