//! [`TensorValue`]: a node of the tape — its value, the values it was computed from, and the
//! backward rule of the operation that made it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

/// Creation counter: a node's id orders it on the tape (parents always have smaller ids).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The backward rule of one recorded operation: given the adjoint of the output, return one
/// adjoint per input (`None` where an input receives nothing).
pub(crate) type BackwardFn = Box<dyn Fn(&BackwardContext<'_>) -> Result<Vec<Option<Tensor>>>>;

pub(crate) struct Node {
    pub(crate) id: u64,
    pub(crate) op: &'static str,
    pub(crate) shape: Vec<usize>,
    pub(crate) value: RefCell<Option<Tensor>>,
    pub(crate) requires_grad: bool,
    pub(crate) is_leaf: bool,
    pub(crate) parents: Vec<TensorValue>,
    pub(crate) backward: Option<BackwardFn>,
}

impl Drop for Node {
    // Dropping a long chain of nodes recursively could overflow the stack; unlink it with a loop.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.parents);
        while let Some(value) = stack.pop() {
            if let Ok(mut node) = Rc::try_unwrap(value.0) {
                stack.append(&mut node.parents);
            }
        }
    }
}

/// A tensor recorded on the tape.
///
/// Leaves are made with [`constant`] (no gradient) or [`parameter`] (gradient wanted); every
/// operation (`matmul`, `softmax_last_axis`, …) returns a new `TensorValue` that remembers its
/// inputs. Cloning is cheap and yields the same node.
///
/// ```
/// use llm_from_scratch::{constant, parameter};
/// let w = parameter(&[2], &[3.0, -1.0])?;
/// let x = constant(&[2], &[2.0, 5.0])?;
/// let loss = w.mul(&x)?.sum()?; // 3·2 + (−1)·5 = 1
/// assert_eq!(loss.value()?.as_slice(), &[1.0]);
/// let grads = loss.backward()?;
/// assert_eq!(grads.get(&w).unwrap().as_slice(), &[2.0, 5.0]); // ∂loss/∂w = x
/// # Ok::<(), llm_from_scratch::TensorAutodiffError>(())
/// ```
#[derive(Clone)]
pub struct TensorValue(pub(crate) Rc<Node>);

impl std::fmt::Debug for TensorValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorValue")
            .field("id", &self.0.id)
            .field("op", &self.0.op)
            .field("shape", &self.0.shape)
            .field("requires_grad", &self.0.requires_grad)
            .finish()
    }
}

/// A leaf that receives no gradient (inputs, masks, fixed tables).
///
/// # Errors
/// [`TensorAutodiffError::LengthMismatch`] if `values` does not fill `shape`.
pub fn constant(shape: &[usize], values: &[f64]) -> Result<TensorValue> {
    Ok(TensorValue::leaf(Tensor::new(shape, values.to_vec())?, false))
}

/// A leaf whose gradient [`TensorValue::backward`] computes (weights, or an input whose gradient
/// a chapter prints).
///
/// # Errors
/// [`TensorAutodiffError::LengthMismatch`] if `values` does not fill `shape`.
pub fn parameter(shape: &[usize], values: &[f64]) -> Result<TensorValue> {
    Ok(TensorValue::leaf(Tensor::new(shape, values.to_vec())?, true))
}

impl TensorValue {
    /// A leaf holding `tensor`; `requires_grad` selects parameter (true) or constant (false).
    pub fn leaf(tensor: Tensor, requires_grad: bool) -> Self {
        Self(Rc::new(Node {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            op: if requires_grad { "parameter" } else { "constant" },
            shape: tensor.shape().to_vec(),
            value: RefCell::new(Some(tensor)),
            requires_grad,
            is_leaf: true,
            parents: Vec::new(),
            backward: None,
        }))
    }

    /// Records the output of an operation. The backward rule is kept only when some input needs
    /// a gradient; otherwise the node is a plain value and costs nothing in the backward sweep.
    pub(crate) fn record(
        op: &'static str,
        parents: Vec<TensorValue>,
        value: Tensor,
        backward: impl Fn(&BackwardContext<'_>) -> Result<Vec<Option<Tensor>>> + 'static,
    ) -> Self {
        let requires_grad = parents.iter().any(|p| p.0.requires_grad);
        let backward: Option<BackwardFn> = requires_grad.then(|| Box::new(backward) as BackwardFn);
        Self(Rc::new(Node {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            op,
            shape: value.shape().to_vec(),
            value: RefCell::new(Some(value)),
            requires_grad,
            is_leaf: false,
            parents: if requires_grad { parents } else { Vec::new() },
            backward,
        }))
    }

    /// The value, for an operation named `op` that needs it.
    pub(crate) fn read(&self, op: &'static str) -> Result<Tensor> {
        self.0.value.borrow().clone().ok_or(TensorAutodiffError::Released {
            op,
            node: self.0.id,
            created_by: self.0.op,
        })
    }

    /// The value of this node.
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if [`TensorValue::release`] freed it.
    pub fn value(&self) -> Result<Tensor> {
        self.read("value")
    }

    /// The shape (known even after the value is released).
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.shape.iter().product()
    }

    /// `true` when the value has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The creation index: parents always have smaller ids than their children.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The operation that produced this node (`"constant"`, `"parameter"`, `"matmul"`, …).
    pub fn op(&self) -> &'static str {
        self.0.op
    }

    /// `true` for parameters and for every value computed from one.
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }

    /// `true` when both handles name the same node.
    pub fn same_node(&self, other: &TensorValue) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    /// Frees the stored value. Operations (and backward rules) that later need it return
    /// [`TensorAutodiffError::Released`]; rules that need only the shape still work.
    pub fn release(&self) {
        self.0.value.borrow_mut().take();
    }

    /// `true` once [`TensorValue::release`] was called.
    pub fn is_released(&self) -> bool {
        self.0.value.borrow().is_none()
    }

    /// Replaces the value of a leaf (an optimiser step), keeping its identity.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if the shape changes, or
    /// [`TensorAutodiffError::InvalidArgument`] if the node is not a leaf.
    pub fn set_value(&self, tensor: Tensor) -> Result<()> {
        if !self.0.is_leaf {
            return Err(TensorAutodiffError::InvalidArgument {
                op: "set_value",
                name: "node",
                value: self.0.id as f64,
                reason: "only leaves (constants and parameters) can be assigned",
            });
        }
        if tensor.shape() != self.shape() {
            return Err(TensorAutodiffError::ShapeMismatch {
                op: "set_value",
                lhs: Shape::from(self.shape()),
                rhs: Shape::from(tensor.shape()),
                reason: "a leaf keeps its shape",
            });
        }
        *self.0.value.borrow_mut() = Some(tensor);
        Ok(())
    }
}

/// What a backward rule may look at: the inputs of its operation, its output and the adjoint
/// arriving at that output — and, for a matrix product, the adjoint of its left operand summed so
/// far, to add its own part onto in place ([`BackwardContext::take_lhs_sum`]).
pub(crate) struct BackwardContext<'a> {
    pub(crate) node: &'a Node,
    pub(crate) grad: &'a Tensor,
    /// The first input's sum so far, lent by the sweep for the rule's call: `None` where no
    /// consumer has contributed yet, or once the rule took it.
    pub(crate) lhs_sum: Cell<Option<Tensor>>,
}

impl BackwardContext<'_> {
    /// The value of input `i` (an error if it was released).
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if that input's value was freed.
    pub fn input(&self, i: usize) -> Result<Tensor> {
        self.node.parents[i].read(self.node.op)
    }

    /// Number of inputs of the operation.
    pub fn inputs(&self) -> usize {
        self.node.parents.len()
    }

    /// The shape of input `i` (always available).
    pub fn input_shape(&self, i: usize) -> &[usize] {
        self.node.parents[i].shape()
    }

    /// Whether input `i` wants an adjoint (lets a rule skip work nobody reads).
    pub fn wants(&self, i: usize) -> bool {
        self.node.parents[i].requires_grad()
    }

    /// The output value of the operation.
    ///
    /// # Errors
    /// [`TensorAutodiffError::Released`] if the output's value was freed.
    pub fn output(&self) -> Result<Tensor> {
        self.node.value.borrow().clone().ok_or(TensorAutodiffError::Released {
            op: self.node.op,
            node: self.node.id,
            created_by: self.node.op,
        })
    }

    /// The adjoint of the output, `∂loss/∂output`.
    pub fn grad(&self) -> &Tensor {
        self.grad
    }

    /// The adjoint of the first input summed so far by the operations swept before this one, if
    /// any. Only the matrix products take it (`ops/matmul.rs`): their kernel adds `dC·Bᵀ` onto it
    /// in place instead of writing a new tensor that the sweep then adds. A rule that takes the
    /// sum returns the total for input 0; a sum left untaken is added to the rule's result as usual.
    pub fn take_lhs_sum(&self) -> Option<Tensor> {
        self.lhs_sum.take()
    }
}
