//! `generate STATE`: a character model saved by `ch37-train-on-text --save PATH`.

use std::path::Path;

use ch37_train_on_text::VOCABULARY_NOTE;
use demo_support::cli::{self, Failure};
use llm_from_scratch::model::{CharTokenizer, load_train_state};

use crate::{Cli, write_tokens};

/// The prompt unless `--prompt` or `--prompt-file` gives one: the first words of the corpus.
const DEFAULT_PROMPT: &str = "Non eram nescius";

/// Writes the prompt, then the characters the model of `path` continues it with.
pub(crate) fn generate(args: &Cli, path: &Path) -> Result<(), Failure> {
    if args.chat {
        return Err("--chat needs a model with a chat template: a GGUF file (--model)".into());
    }
    let state = load_train_state(path)?;
    let vocabulary = state
        .notes
        .get(VOCABULARY_NOTE)
        .ok_or_else(|| format!("{}: no vocabulary is saved with this model", path.display()))?;
    let tokenizer = CharTokenizer::from_chars(vocabulary.chars())?;
    if tokenizer.vocab_size() != state.model.config().vocab_size {
        return Err(format!("{}: the saved vocabulary does not fit the model", path.display()).into());
    }
    let prompt = String::from_utf8(args.prompt_bytes(DEFAULT_PROMPT)?)
        .map_err(|e| format!("the prompt is not UTF-8 (at byte {})", e.utf8_error().valid_up_to()))?;
    if prompt.is_empty() {
        return Err("the prompt is empty: a character model needs at least one character to continue".into());
    }
    let ids = tokenizer.encode(&prompt)?; // an unknown character is refused before anything is printed
    if !args.json {
        cli::print(&prompt)?;
    }
    let spell = |id: usize| tokenizer.vocabulary().get(id).map_or('\u{fffd}', |c| *c).to_string();
    let piece = |id: Option<usize>| id.map_or_else(|| "\n".to_string(), spell);
    write_tokens(args, &state.model, &ids, piece, spell, |_| false)
}
