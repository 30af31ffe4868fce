//! `outbox-console`: the web console of the fenced outbox, served by `outboxctl web` and, with
//! `[console] enabled = true`, under `/console/` on the dispatcher's listener.
//!
//! Server-side rendered HTML (askama templates in `templates/`, every value escaped), no
//! JavaScript: the pages refresh themselves with `<meta http-equiv="refresh">`. Pages: the
//! overview (`/`: counts by state and by destination, oldest pending, partitions and their
//! leaders, dispatcher instances, destinations, recent rejections), ops by state (`/ops?state=dead`)
//! and one op with its attempts (`/ops/{op_id}`, without its body or header values).
//!
//! Without logins ([`Access::read_only`], the default) it changes nothing: every route answers
//! `GET` (and `HEAD`) only, any other method gets 405, and the pages hold no forms; it has no
//! authentication, so bind it to loopback or put it behind a proxy of your own.
//!
//! With logins ([`Access::logins`]: users with argon2 password hashes, or a trusted proxy's
//! header) every page needs someone signed in, a viewer or an operator, and operators get plain
//! HTML forms to replay or cancel an op, replay the dead ops of a destination (previewed by a
//! dry run first) and pause or resume a destination. Each form carries a CSRF token and a
//! reason, goes through the store method `outboxctl` uses, and is logged in `outbox_admin_log`
//! as `console:<user>`. Sessions are signed cookies (`auth`); the actions are in `actions`.
//!
//! ```no_run
//! # async fn example(store: outbox_store::Store) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let options = outbox_console::Options::default();
//! outbox_console::serve(listener, store, options, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```

#![warn(missing_docs)]

mod access;
mod actions;
mod auth;
pub mod describe;
mod error;
mod headers;
mod login;
mod pages;
pub mod password;
mod routes;
mod text;
mod view;

pub use access::{Access, AccessError, Role, SessionKey};

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use outbox_store::Store;

/// How the console is served.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where the pages live: `""` serves them at `/`, `"/console"` at `/console/` (the
    /// dispatcher's choice). Every link on the pages starts with it. A trailing `/` is ignored,
    /// a missing leading one added. Default: `""`.
    pub base_path: String,
    /// How often the pages reload themselves; zero turns that off. Each reload of the overview
    /// counts the ops by state and destination, as `outboxctl status` does. Default: 10 s.
    pub refresh: Duration,
    /// The destinations the dispatcher's configuration names, when the console knows it: the
    /// destinations table then says which destinations of the ops are not configured (their
    /// ops wait, pending, until they are). `None`: not known, shown as "—".
    pub configured_destinations: Option<Vec<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            base_path: String::new(),
            refresh: Duration::from_secs(10),
            configured_destinations: None,
        }
    }
}

impl Options {
    /// The base path as links use it: empty, or `/` and a name without a trailing `/`.
    fn normalized_base(&self) -> String {
        let trimmed = self.base_path.trim_matches('/');
        if trimmed.is_empty() {
            String::new()
        } else {
            format!("/{trimmed}")
        }
    }
}

/// The console: its options and, once attached, the store its pages read. Cheap to clone;
/// every clone serves the same store.
#[derive(Debug, Clone)]
pub struct Console {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    store: OnceLock<Store>,
    base: String,
    options: Options,
    access: Access,
}

impl Console {
    /// A read-only console with no store yet: its pages answer 503 until [`Console::attach`]
    /// gives it one (the dispatcher serves its listener before the database answers).
    pub fn new(options: Options) -> Console {
        Console::with_access(options, Access::read_only())
    }

    /// [`Console::new`] with who may sign in and act: `access`.
    pub fn with_access(options: Options, access: Access) -> Console {
        Console {
            shared: Arc::new(Shared {
                store: OnceLock::new(),
                base: options.normalized_base(),
                options,
                access,
            }),
        }
    }

    /// A console reading `store`.
    pub fn with_store(store: Store, options: Options) -> Console {
        let console = Console::new(options);
        console.attach(store);
        console
    }

    /// Gives the console the store to read; `false` (and `store` unused) when it already has
    /// one.
    pub fn attach(&self, store: Store) -> bool {
        self.shared.store.set(store).is_ok()
    }

    /// The store, once attached.
    pub fn store(&self) -> Option<&Store> {
        self.shared.store.get()
    }

    /// The routes of the pages, under the base path, with the security headers on every
    /// answer. Merge it into another router (the dispatcher's) or serve it alone.
    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }

    fn base(&self) -> &str {
        &self.shared.base
    }

    fn options(&self) -> &Options {
        &self.shared.options
    }

    fn access(&self) -> &Access {
        &self.shared.access
    }
}

/// The console's routes reading `store`: [`Console::router`] of [`Console::with_store`].
pub fn router(store: Store, options: Options) -> axum::Router {
    Console::with_store(store, options).router()
}

/// Serves the read-only console on `listener` until `shutdown` completes, then lets open
/// requests finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Store,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    Console::with_store(store, options)
        .serve(listener, shutdown)
        .await
}

impl Console {
    /// Serves this console on `listener` until `shutdown` completes, then lets open requests
    /// finish.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::Options;

    #[test]
    fn base_paths_are_normalized_for_links() {
        let base = |p: &str| {
            Options {
                base_path: p.to_owned(),
                ..Options::default()
            }
            .normalized_base()
        };
        assert_eq!(base(""), "");
        assert_eq!(base("/"), "");
        assert_eq!(base("/console/"), "/console");
        assert_eq!(base("console"), "/console");
    }
}
