mod limits;
mod live;
mod router;
mod support;
