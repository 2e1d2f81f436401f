//! Tools that need the user: `ask_user` (questions) and `store_secret` (a credential). At a
//! terminal they ask inline; otherwise the engine parks the run and `tooldispatch answer` (or
//! the HTTP API) finishes the call with the user's answer (DESIGN §3.15, §3.17).

mod ask_user;
mod store_secret;
#[cfg(test)]
mod tests;

pub use ask_user::AskUser;
pub use store_secret::StoreSecret;
