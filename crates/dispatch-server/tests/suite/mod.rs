mod live;
mod router;
mod support;
