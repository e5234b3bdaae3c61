//! Scenario files in `scenarios/`.
