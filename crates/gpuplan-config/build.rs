// The catalog (models, GPU and system files, shipped profiles, prices and reliability files) is compiled into the
// binary by `include_dir!` in `src/catalog.rs`; rebuild when any of its files changes.
fn main() {
    for dir in ["../../models", "../../calibration/systems", "../../calibration/profiles", "../../calibration/prices", "../../calibration/reliability"] {
        println!("cargo:rerun-if-changed={dir}");
    }
}
