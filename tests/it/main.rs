
mod calibrate;
