//! Where the pretrained model is: the path a binary or a test loads when none is given.
//!
//! `scripts/fetch-model` downloads SmolLM2-135M-Instruct (GGUF, Q4_1) into a cache folder outside
//! the repository and prints its path. [`model_path_from_env`] finds it the same way:
//!
//! 1. `LLM_MODEL`, if set: that path, whether or not a file is there (a wrong path should fail
//!    loudly when it is loaded, not be skipped);
//! 2. otherwise `SmolLM2-135M-Instruct.Q4_1.gguf` in
//!    `${LLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-from-scratch}`, if the file exists.
//!
//! Empty variables count as unset, as in the script.

use std::path::PathBuf;

/// The variable that names the model file.
pub const MODEL_ENV: &str = "LLM_MODEL";
/// The file name `scripts/fetch-model` writes.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// `name`'s value if it is set and not empty.
fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The folder `scripts/fetch-model` stores the model in:
/// `${LLM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-from-scratch}`; `None` if none of these
/// variables is set.
pub fn default_cache_dir() -> Option<PathBuf> {
    var("LLM_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|cache| cache.join("llm-from-scratch")))
        .or_else(|| var("HOME").map(|home| home.join(".cache").join("llm-from-scratch")))
}

/// The model to load when none is given: `LLM_MODEL`, else the file `scripts/fetch-model` writes
/// if it is there; `None` when there is neither.
///
/// ```
/// use llm_from_scratch::gguf::model_path_from_env;
/// match model_path_from_env() {
///     Some(path) => println!("loading {}", path.display()),
///     None => eprintln!("no model: run scripts/fetch-model, then set LLM_MODEL=<path>"),
/// }
/// ```
pub fn model_path_from_env() -> Option<PathBuf> {
    var(MODEL_ENV).or_else(|| default_cache_dir().map(|dir| dir.join(DEFAULT_MODEL_FILE)).filter(|p| p.is_file()))
}
