mod agent_tests;
mod anthropic_tests;
mod conversation_tests;
mod gemini_tests;
mod openai_tests;
mod responses_tests;
mod retry_tests;
mod support;
