//! Finding the CUDA libraries without help: `GPUPLAN_CUDA_LIB_DIR`, `CUDA_HOME`/`CUDA_PATH`,
//! `/usr/local/cuda*`, the pip `nvidia-*` packages of any Python found, `LD_LIBRARY_PATH`, the
//! driver's folders and the `ldconfig` cache.
//!
//! cudarc opens its libraries by name (`libnccl.so`, `libcublas.so.13`, ...), and the dynamic
//! linker reads `LD_LIBRARY_PATH` only when a process starts. So `cli` makes a folder of links
//! named as cudarc asks (see [`link_folder`]), puts it and the found folders first on
//! `LD_LIBRARY_PATH`, and starts itself again once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The environment variable a user sets to point at the libraries (folders, `:`-separated).
pub const LIB_DIR_VAR: &str = "GPUPLAN_CUDA_LIB_DIR";

/// One library `calibrate` loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CudaLib {
    Driver,
    Nvrtc,
    Cublas,
    CublasLt,
    Nccl,
    Nvml,
}

impl CudaLib {
    pub const ALL: [CudaLib; 6] = [CudaLib::Driver, CudaLib::Nvrtc, CudaLib::Cublas, CudaLib::CublasLt, CudaLib::Nccl, CudaLib::Nvml];

    /// File stem: `libcuda` for `libcuda.so.1`.
    pub fn stem(self) -> &'static str {
        match self {
            CudaLib::Driver => "libcuda",
            CudaLib::Nvrtc => "libnvrtc",
            CudaLib::Cublas => "libcublas",
            CudaLib::CublasLt => "libcublasLt",
            CudaLib::Nccl => "libnccl",
            CudaLib::Nvml => "libnvidia-ml",
        }
    }

    /// The name cudarc (or nvml-wrapper) opens first; the link folder uses it.
    pub fn link_name(self) -> &'static str {
        match self {
            CudaLib::Driver => "libcuda.so",
            CudaLib::Nvrtc => "libnvrtc.so",
            CudaLib::Cublas => "libcublas.so",
            CudaLib::CublasLt => "libcublasLt.so",
            CudaLib::Nccl => "libnccl.so",
            CudaLib::Nvml => "libnvidia-ml.so",
        }
    }

    pub fn what(self) -> &'static str {
        match self {
            CudaLib::Driver => "the CUDA driver, installed with the NVIDIA driver",
            CudaLib::Nvrtc => "NVRTC, which compiles the benchmark kernels",
            CudaLib::Cublas => "cuBLAS",
            CudaLib::CublasLt => "cuBLASLt, which runs the GEMM benchmarks",
            CudaLib::Nccl => "NCCL, which runs the collective benchmarks",
            CudaLib::Nvml => "NVML, which reads power, clocks and temperature",
        }
    }

    /// Where a user gets it.
    pub fn install_hint(self) -> &'static str {
        match self {
            CudaLib::Driver | CudaLib::Nvml => "install the NVIDIA driver; without a GPU driver `calibrate` cannot run on this machine",
            CudaLib::Nvrtc => "`pip install nvidia-cuda-nvrtc` or a CUDA toolkit",
            CudaLib::Cublas | CudaLib::CublasLt => "`pip install nvidia-cublas` or a CUDA toolkit",
            CudaLib::Nccl => "`pip install nvidia-nccl-cu13` (PyTorch brings it)",
        }
    }

    /// Preferred major version (cudarc is built against CUDA 13; NCCL is 2, NVML and the driver 1).
    fn preferred_major(self) -> &'static str {
        match self {
            CudaLib::Driver | CudaLib::Nvml => "1",
            CudaLib::Nccl => "2",
            _ => "13",
        }
    }

    /// Does `file_name` name this library (`libcublas.so`, `libcublas.so.13`, `libcublas.so.13.1.0.3`)?
    pub fn matches(self, file_name: &str) -> bool {
        let Some(rest) = file_name.strip_prefix(self.stem()) else {
            return false;
        };
        rest == ".so" || rest.starts_with(".so.")
    }

    /// Rank candidates: the preferred major first, then the plain `.so`, then others; shorter names
    /// (the soname) before fully versioned ones.
    fn rank(self, file_name: &str) -> (u8, usize) {
        let rest = &file_name[self.stem().len()..];
        let major = rest.strip_prefix(".so.").map(|v| v.split('.').next().unwrap_or(""));
        let class = match major {
            Some(m) if m == self.preferred_major() => 0,
            None => 1,
            Some(_) => 2,
        };
        (class, file_name.len())
    }
}

/// One place searched, with why it was searched (for the error message).
#[derive(Debug, Clone, PartialEq)]
pub struct SearchDir {
    pub dir: PathBuf,
    pub origin: String,
}

/// A library found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub lib: CudaLib,
    pub path: PathBuf,
    pub origin: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Discovery {
    pub found: Vec<Found>,
    pub missing: Vec<CudaLib>,
    pub searched: Vec<SearchDir>,
}

impl Discovery {
    pub fn get(&self, lib: CudaLib) -> Option<&Found> {
        self.found.iter().find(|f| f.lib == lib)
    }
    /// Folders of the found libraries, in search order, without repeats.
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for f in &self.found {
            if let Some(d) = f.path.parent() {
                if seen.insert(d.to_path_buf()) {
                    out.push(d.to_path_buf());
                }
            }
        }
        out
    }
}

/// A library `calibrate` needs was not found.
#[derive(Debug, thiserror::Error)]
#[error("{}", missing_message(.lib, .searched))]
pub struct MissingLibrary {
    pub lib: CudaLib,
    pub searched: Vec<SearchDir>,
}

fn missing_message(lib: &CudaLib, searched: &[SearchDir]) -> String {
    let mut s = format!("cannot find `{}.so*` ({})\nlooked in:", lib.stem(), lib.what());
    if searched.is_empty() {
        s.push_str(" nowhere (no candidate folder exists)");
    }
    for d in searched {
        s.push_str(&format!("\n  {} ({})", d.dir.display(), d.origin));
    }
    s.push_str(&format!("\nhint: set `{LIB_DIR_VAR}` to the folder(s) holding `{}.so*` (`:`-separated), or {}", lib.stem(), lib.install_hint()));
    s
}

/// What the search reads from the process environment, gathered once so tests can fake it.
#[derive(Debug, Clone, Default)]
pub struct SearchEnv {
    pub lib_dir: Option<String>,
    pub cuda_home: Option<String>,
    pub cuda_path: Option<String>,
    pub ld_library_path: Option<String>,
    pub virtual_env: Option<String>,
    pub conda_prefix: Option<String>,
    pub home: Option<String>,
    /// `site-packages` folders reported by the Pythons found (`sys.path`).
    pub python_paths: Vec<PathBuf>,
    /// Library paths from `ldconfig -p`.
    pub ldconfig: Vec<PathBuf>,
    /// Root of the file system (`/` except in tests).
    pub root: PathBuf,
}

impl SearchEnv {
    /// Read the real environment: variables, `python3`'s `sys.path`, `ldconfig -p`.
    pub fn from_process() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let mut python_paths = Vec::new();
        for py in ["python3", "python"] {
            let out = std::process::Command::new(py)
                .args(["-c", "import sys; print('\\n'.join(p for p in sys.path if p))"])
                .stderr(std::process::Stdio::null())
                .output();
            if let Ok(o) = out {
                if o.status.success() {
                    python_paths.extend(String::from_utf8_lossy(&o.stdout).lines().map(PathBuf::from));
                }
            }
        }
        let mut ldconfig = Vec::new();
        for exe in ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"] {
            if let Ok(o) = std::process::Command::new(exe).arg("-p").stderr(std::process::Stdio::null()).output() {
                if o.status.success() {
                    for line in String::from_utf8_lossy(&o.stdout).lines() {
                        if let Some((_, p)) = line.rsplit_once("=> ") {
                            ldconfig.push(PathBuf::from(p.trim()));
                        }
                    }
                    break;
                }
            }
        }
        SearchEnv {
            lib_dir: var(LIB_DIR_VAR),
            cuda_home: var("CUDA_HOME"),
            cuda_path: var("CUDA_PATH"),
            ld_library_path: var("LD_LIBRARY_PATH"),
            virtual_env: var("VIRTUAL_ENV"),
            conda_prefix: var("CONDA_PREFIX"),
            home: var("HOME"),
            python_paths,
            ldconfig,
            root: PathBuf::from("/"),
        }
    }
}

fn glob_dirs(pattern_root: &Path, parts: &[&str]) -> Vec<PathBuf> {
    // A tiny glob: each part is a literal or `*` (any entry) or `prefix*`.
    let mut cur = vec![pattern_root.to_path_buf()];
    for part in parts {
        let mut next = Vec::new();
        for dir in &cur {
            if let Some(prefix) = part.strip_suffix('*') {
                if let Ok(rd) = std::fs::read_dir(dir) {
                    let mut entries: Vec<PathBuf> = rd
                        .filter_map(|e| e.ok())
                        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect();
                    entries.sort();
                    next.extend(entries);
                }
            } else {
                let p = dir.join(part);
                if p.is_dir() {
                    next.push(p);
                }
            }
        }
        cur = next;
    }
    cur
}

/// Every folder to look in, in order, with its origin. Only existing folders are listed.
pub fn search_dirs(env: &SearchEnv) -> Vec<SearchDir> {
    let mut out: Vec<SearchDir> = Vec::new();
    let mut push = |dir: PathBuf, origin: String| {
        if dir.is_dir() && !out.iter().any(|d| d.dir == dir) {
            out.push(SearchDir { dir, origin });
        }
    };
    let root = &env.root;
    let under = |p: &str| -> PathBuf { root.join(p.trim_start_matches('/')) };

    if let Some(v) = &env.lib_dir {
        for d in v.split(':').filter(|d| !d.is_empty()) {
            push(PathBuf::from(d), LIB_DIR_VAR.to_string());
        }
    }
    let toolkit_libs = ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"];
    for (name, v) in [("CUDA_HOME", &env.cuda_home), ("CUDA_PATH", &env.cuda_path)] {
        if let Some(v) = v {
            for l in toolkit_libs {
                push(Path::new(v).join(l), name.to_string());
            }
        }
    }
    let mut cuda_roots = vec![under("/usr/local/cuda")];
    cuda_roots.extend(glob_dirs(&under("/usr/local"), &["cuda-*"]));
    for r in cuda_roots {
        for l in toolkit_libs {
            push(r.join(l), "CUDA toolkit".to_string());
        }
    }
    // Python: site-packages from sys.path, the active venv/conda, and common venv roots.
    let mut site_packages: Vec<PathBuf> = env.python_paths.iter().filter(|p| p.ends_with("site-packages") || p.ends_with("dist-packages")).cloned().collect();
    let mut venv_roots: Vec<PathBuf> = Vec::new();
    for v in [&env.virtual_env, &env.conda_prefix].into_iter().flatten() {
        venv_roots.push(PathBuf::from(v));
    }
    for base in ["/opt", "/usr/local", "/srv", "/workspace"] {
        venv_roots.extend(glob_dirs(&under(base), &["*", ".venv"]));
        venv_roots.extend(glob_dirs(&under(base), &["*", "venv"]));
        venv_roots.extend(glob_dirs(&under(base), &["conda"]));
        venv_roots.extend(glob_dirs(&under(base), &["miniconda*"]));
    }
    if let Some(h) = &env.home {
        for v in [".venv", "venv", "miniconda3", "anaconda3", ".local"] {
            venv_roots.push(Path::new(h).join(v));
        }
    }
    venv_roots.push(under("/usr"));
    venv_roots.push(under("/usr/local"));
    for r in venv_roots {
        site_packages.extend(glob_dirs(&r, &["lib", "python3*", "site-packages"]));
        site_packages.extend(glob_dirs(&r, &["lib", "python3*", "dist-packages"]));
    }
    for sp in site_packages {
        let origin = format!("pip packages in {}", sp.display());
        for d in glob_dirs(&sp, &["nvidia", "*", "lib"]) {
            push(d, origin.clone());
        }
        for d in glob_dirs(&sp, &["torch", "lib"]) {
            push(d, origin.clone());
        }
    }
    if let Some(v) = &env.ld_library_path {
        for d in v.split(':').filter(|d| !d.is_empty()) {
            push(PathBuf::from(d), "LD_LIBRARY_PATH".to_string());
        }
    }
    for d in [
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib64",
        "/usr/lib/wsl/lib",
    ] {
        push(under(d), "system library folder".to_string());
    }
    for p in &env.ldconfig {
        if let Some(d) = p.parent() {
            push(d.to_path_buf(), "ldconfig cache".to_string());
        }
    }
    out
}

/// Search every folder for every library; the first folder (in order) holding one wins, and within
/// a folder the best-ranked file name.
pub fn discover(env: &SearchEnv) -> Discovery {
    let searched = search_dirs(env);
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for lib in CudaLib::ALL {
        let mut hit = None;
        for sd in &searched {
            let Ok(rd) = std::fs::read_dir(&sd.dir) else {
                continue;
            };
            let mut names: Vec<String> = rd.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| lib.matches(n)).collect();
            names.sort_by_key(|n| lib.rank(n));
            // A dangling link is no library.
            if let Some(n) = names.into_iter().find(|n| sd.dir.join(n).exists()) {
                hit = Some(Found { lib, path: sd.dir.join(n), origin: sd.origin.clone() });
                break;
            }
        }
        match hit {
            Some(f) => found.push(f),
            None => missing.push(lib),
        }
    }
    Discovery { found, missing, searched }
}

/// Make `dir` hold one link per found library, named as cudarc opens it (`libnccl.so` ->
/// `.../libnccl.so.2`), replacing stale links.
pub fn link_folder(discovery: &Discovery, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for f in &discovery.found {
        let link = dir.join(f.lib.link_name());
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&f.path, &link)?;
        // cudarc also tries `<name>.<major>` (e.g. `libcublas.so.13`); the plain name comes first.
    }
    Ok(())
}

/// A stable per-user folder for the links, keyed by the found paths.
pub fn link_folder_path(discovery: &Discovery) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in &discovery.found {
        f.path.hash(&mut h);
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    std::env::temp_dir().join(format!("gpuplan-cuda-libs-{user}")).join(format!("{:016x}", h.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_only_their_library() {
        assert!(CudaLib::Cublas.matches("libcublas.so.13"));
        assert!(CudaLib::Cublas.matches("libcublas.so"));
        assert!(!CudaLib::Cublas.matches("libcublasLt.so.13"));
        assert!(CudaLib::CublasLt.matches("libcublasLt.so.13.1.0.3"));
        assert!(!CudaLib::Driver.matches("libcudart.so.13"));
        assert!(CudaLib::Driver.matches("libcuda.so.1"));
        assert!(CudaLib::Nccl.matches("libnccl.so.2"));
        assert!(!CudaLib::Nccl.matches("libnccl-net.so"));
    }

    #[test]
    fn ranking_prefers_the_soname_of_the_right_major() {
        let mut v = vec!["libcublas.so.12", "libcublas.so.13.1.0.3", "libcublas.so", "libcublas.so.13"];
        v.sort_by_key(|n| CudaLib::Cublas.rank(n));
        assert_eq!(v, ["libcublas.so.13", "libcublas.so.13.1.0.3", "libcublas.so", "libcublas.so.12"]);
    }
}
