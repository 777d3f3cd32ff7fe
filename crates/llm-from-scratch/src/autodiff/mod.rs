//! Reverse-mode automatic differentiation on a tape of tensors.
//!
//! Every chapter runs on it: chapters 27–32, 34 and 35 compare the tape's gradients with central
//! differences ([`gradcheck`]), and chapter 36 trains a decoder with them.
//!
//! Every operation builds its output value and records, next to it, how to send an adjoint back to
//! its inputs. The *tape* of a value is the set of nodes it was computed from, in creation order;
//! [`TensorValue::backward`] sweeps it in reverse. Operations live one family per file in `ops/`,
//! each forward followed by its backward.

mod backward;
mod gradcheck;
pub(crate) mod ops;
mod value;

pub use backward::{Gradients, Tape};
pub use gradcheck::{GradcheckConfig, GradcheckReport, GradcheckTensor, gradcheck};
pub use ops::concat;
pub use value::{TensorValue, constant, parameter};
