//! `generate --model FILE`: a pretrained LLaMA-family model from a GGUF file, with the
//! byte-level BPE tokenizer the file carries.

use std::path::Path;

use demo_support::cli::{self, Failure};
use llm_from_scratch::bpe::{BpeTokenizer, StreamDecoder};
use llm_from_scratch::gguf::{Gguf, GgufRope, QuantizedLlama, gguf_tokenizer};

use crate::{Cli, write_tokens};

/// The prompt unless `--prompt` or `--prompt-file` gives one.
const DEFAULT_PROMPT: &str = "The capital of France is";

/// The token that opens a turn of a ChatML chat.
const START: &str = "<|im_start|>";
/// The token that closes it.
const END: &str = "<|im_end|>";

/// The prompt as the first user turn of a ChatML chat, as the file's `tokenizer.chat_template`
/// writes one with a generation prompt (its default system turn first, if it has one):
///
/// ```text
/// <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n
/// ```
fn chatml(file: &Gguf<'_>, prompt: &[u8]) -> Result<Vec<u8>, Failure> {
    let template = file.metadata().string("tokenizer.chat_template")?;
    if !template.contains(START) || !template.contains(END) {
        return Err("--chat: the file's chat template is not ChatML (no <|im_start|> turns)".into());
    }
    // the default system turn, written in the template as '<|im_start|>system\n…<|im_end|>'
    let opening = format!("{START}system\n");
    let system = template.split_once(&opening).and_then(|(_, rest)| rest.split_once(END)).map(|(text, _)| text);
    let mut text = Vec::new();
    if let Some(system) = system {
        text.extend(format!("{opening}{system}{END}\n").bytes());
    }
    text.extend(format!("{START}user\n").bytes());
    text.extend(prompt);
    text.extend(format!("{END}\n{START}assistant\n").bytes());
    Ok(text)
}

/// Writes the prompt (not in a chat), then the tokens the model of `path` continues it with.
pub(crate) fn generate(args: &Cli, path: &Path) -> Result<(), Failure> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = Gguf::parse(&bytes)?;
    let tokenizer = gguf_tokenizer(&file)?;
    let prompt = args.prompt_bytes(DEFAULT_PROMPT)?;
    let (text, end_of_turn) = if args.chat {
        let end = tokenizer.id_of(END).ok_or("--chat: the vocabulary has no <|im_end|> token")?;
        (chatml(&file, &prompt)?, Some(end))
    } else {
        (prompt.clone(), None)
    };
    drop(file);
    // the weights stay in the file's blocks (98 MB, not 1.08 GB of f64), the same logits
    let model = QuantizedLlama::from_bytes(bytes, GgufRope::AsStored)?;
    if tokenizer.vocab_size() != model.config().vocab_size {
        let (tokens, vocab) = (tokenizer.vocab_size(), model.config().vocab_size);
        return Err(format!("{}: the tokenizer has {tokens} tokens, the model {vocab}", path.display()).into());
    }
    let ids = tokenizer.encode_bytes(&text);
    if ids.is_empty() {
        return Err("the prompt is empty: nothing to continue".into());
    }
    if !args.json && !args.chat {
        cli::print(&String::from_utf8_lossy(&prompt))?;
    }
    let mut stream = Some(StreamDecoder::new(&tokenizer));
    let piece = |id: Option<usize>| match (id, &mut stream) {
        (Some(id), Some(stream)) => stream.push(id).unwrap_or_default(),
        (None, _) => stream.take().map(StreamDecoder::finish).unwrap_or_default() + "\n",
        (Some(_), None) => String::new(),
    };
    write_tokens(args, &model, &ids, piece, |id| spell(&tokenizer, id), |id| Some(id) == end_of_turn)
}

/// One token's text (its bytes; a piece of a character shows as U+FFFD).
fn spell(tokenizer: &BpeTokenizer, id: usize) -> String {
    String::from_utf8_lossy(tokenizer.token_bytes(id).unwrap_or_default()).into_owned()
}
