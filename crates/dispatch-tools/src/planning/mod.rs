//! Planning tools: reasoning guides and the todo list.

pub mod guides;
mod reasoning_guide;
mod write_todo;

pub use reasoning_guide::ReasoningGuide;
pub use write_todo::WriteTodo;
