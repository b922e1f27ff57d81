//! Helpers shared by the test files (each test binary uses some of them).
#![allow(dead_code)]

pub mod kubectl;
pub mod wait;
