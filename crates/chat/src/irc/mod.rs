//! The IRC backend: agents' messages go out over real IRC connections, and
//! everything said in the channels comes back into the history.
//!
//! - `connection` — one IRC connection as an actor: registration,
//!   ISUPPORT, flood control, keepalive, reconnect.
//! - `backend` — [`IrcBackend`], the [`ChatBackend`](crate::ChatBackend):
//!   one observer connection that records every channel message, and one
//!   sender connection per agent nick.
//! - `backfill` — filling the history's gap after an absence from the
//!   server's history (`draft/chathistory`).
//! - `register` — registration (CAP, SASL, NICK/USER) as a state machine.
//! - `nicks` — the observer's default nick and its fallbacks.
//! - `wire`, `isupport`, `members`, `flood`, `tls` — the pieces.

pub(crate) mod backend;
pub(crate) mod backfill;
pub(crate) mod connection;
mod flood;
pub(crate) mod isupport;
pub(crate) mod members;
mod nicks;
mod register;
mod tls;
pub(crate) mod wire;

pub use backend::{IrcBackend, IrcSettings, probe};
pub use connection::{ConnError, Connection, Endpoint, Event, Identity, Sasl, Status};
pub use flood::FloodSettings;
pub use nicks::DEFAULT_OBSERVER_NICK;
pub use tls::{Tls, TlsSetupError};
