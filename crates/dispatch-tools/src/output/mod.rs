//! Output tools: the run's deliverable and the HTML it may be rendered into. They write only
//! under the session's own data directory (never the work directory), so they need no
//! confirmation and do not disturb the file tools' dedupe.

mod html_template;
pub(crate) mod write_result;

pub use html_template::HtmlTemplate;
pub use write_result::WriteResult;
