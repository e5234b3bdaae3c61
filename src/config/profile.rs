//! Calibration profiles written by `gpuplan calibrate` (see `calibrate`).

use std::path::Path;

use super::ConfigError;
use crate::hardware::profile::Profile;

/// Load `calibration/profiles/<name>/profile.toml` (or a path to one).
pub fn load_profile(path: &Path) -> Result<Profile, ConfigError> {
    Err(ConfigError::invalid(path, "calibration", path.display(), "cannot be read yet: the profile format lands with `gpuplan calibrate`"))
}
