//! The reverse sweep: the tape of a value in creation order, and [`Gradients`].

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use crate::autodiff::value::{BackwardContext, Node, TensorValue};
use crate::error::{Result, Shape, TensorAutodiffError};
use crate::tensor::Tensor;

/// The tape of a value: every node it was computed from (itself included), in creation order.
///
/// Nodes that need no gradient keep no link to their inputs, so the tape of a value computed only
/// from constants is that value alone.
pub struct Tape {
    nodes: Vec<TensorValue>,
}

impl Tape {
    /// Collects the tape of `output` (ordered by creation id, so never by hash or address).
    pub fn of(output: &TensorValue) -> Self {
        let mut seen = BTreeSet::new();
        let mut stack = vec![output.clone()];
        let mut nodes = Vec::new();
        while let Some(value) = stack.pop() {
            if !seen.insert(value.id()) {
                continue;
            }
            stack.extend(value.0.parents.iter().cloned());
            nodes.push(value);
        }
        nodes.sort_by_key(TensorValue::id);
        Self { nodes }
    }

    /// Number of nodes on the tape.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// `true` if the tape has no node (never the case for a tape made by [`Tape::of`]).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes in creation order.
    pub fn nodes(&self) -> &[TensorValue] {
        &self.nodes
    }

    /// `true` when every value still stored on the tape is finite (released values are skipped).
    pub fn all_finite(&self) -> bool {
        self.nodes.iter().all(|node| node.0.value.borrow().as_ref().is_none_or(Tensor::all_finite))
    }
}

/// Adjoints of the leaves that require a gradient, keyed by node id.
#[derive(Debug, Clone, Default)]
pub struct Gradients {
    by_id: BTreeMap<u64, Tensor>,
}

impl Gradients {
    /// The gradient of `leaf`, or `None` if no adjoint reached it (or it is not a leaf).
    pub fn get(&self, leaf: &TensorValue) -> Option<&Tensor> {
        self.by_id.get(&leaf.id())
    }

    /// The gradient of `leaf`, zeros of its shape when no adjoint reached it.
    pub fn get_or_zeros(&self, leaf: &TensorValue) -> Tensor {
        self.get(leaf).cloned().unwrap_or_else(|| Tensor::from_parts(leaf.shape().to_vec(), vec![0.0; leaf.len()]))
    }

    /// Number of leaves that received a gradient.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// `true` when no leaf received a gradient.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl TensorValue {
    /// Backward from a one-element output (a loss): `∂loss/∂leaf` for every parameter leaf.
    ///
    /// # Errors
    /// [`TensorAutodiffError::NotScalar`] if the output has more than one element, or any error
    /// of a backward rule (e.g. [`TensorAutodiffError::Released`] when a rule needs a freed value).
    pub fn backward(&self) -> Result<Gradients> {
        if self.len() != 1 {
            return Err(TensorAutodiffError::NotScalar { op: "backward", shape: Shape::from(self.shape()) });
        }
        self.backward_with(&Tensor::from_parts(self.shape().to_vec(), vec![1.0]))
    }

    /// Backward with an explicit upstream adjoint: the gradients of `loss = Σ upstream ⊙ output`.
    ///
    /// # Errors
    /// [`TensorAutodiffError::ShapeMismatch`] if `upstream` does not have the output's shape, or
    /// any error of a backward rule.
    pub fn backward_with(&self, upstream: &Tensor) -> Result<Gradients> {
        if upstream.shape() != self.shape() {
            return Err(TensorAutodiffError::ShapeMismatch {
                op: "backward",
                lhs: Shape::from(self.shape()),
                rhs: Shape::from(upstream.shape()),
                reason: "the upstream adjoint must have the output's shape",
            });
        }
        if !self.requires_grad() {
            return Ok(Gradients::default());
        }
        // many short parallel regions: keep a worker from parking between them (crate::parallel)
        llm_kernels::parallel::with_workers_awake(|| self.sweep(upstream))
    }

    /// The reverse sweep: pop a node's adjoint, run its rule, add the results onto its inputs.
    fn sweep(&self, upstream: &Tensor) -> Result<Gradients> {
        let tape = Tape::of(self);
        let mut gradients = Gradients::default();
        let mut adjoints = Adjoints::default();
        adjoints.by_id.insert(self.id(), upstream.clone());
        // Reverse creation order: every consumer of a node is swept before the node itself.
        for value in tape.nodes.iter().rev() {
            let Some(grad) = adjoints.by_id.remove(&value.id()) else {
                continue;
            };
            let node = &value.0;
            if node.is_leaf {
                gradients.by_id.insert(node.id, grad);
                continue;
            }
            let Some(rule) = node.backward.as_ref() else {
                continue;
            };
            // the first input's sum so far is lent to the rule: a matrix product adds its part
            // onto it in place (BackwardContext::take_lhs_sum); a sum it leaves comes back here
            let lhs = node.parents.first().map(TensorValue::id);
            let lent = lhs.and_then(|id| adjoints.by_id.remove(&id));
            let offered = lent.is_some();
            let context = BackwardContext { node, grad: &grad, lhs_sum: Cell::new(lent) };
            let input_grads = rule(&context)?;
            match (lhs, context.lhs_sum.into_inner()) {
                (Some(id), Some(sum)) => {
                    adjoints.by_id.insert(id, sum);
                }
                _ => debug_assert!(
                    !offered || input_grads.first().is_some_and(Option::is_some),
                    "{}: a rule took the sum of its first input and returned no total",
                    node.op
                ),
            }
            adjoints.accumulate(node, input_grads);
        }
        Ok(gradients)
    }
}

/// The adjoints summed so far during a sweep, by node id.
#[derive(Default)]
struct Adjoints {
    by_id: BTreeMap<u64, Tensor>,
}

impl Adjoints {
    /// Accumulate: a value used twice receives both contributions.
    fn accumulate(&mut self, node: &Node, results: Vec<Option<Tensor>>) {
        for (parent, result) in node.parents.iter().zip(results) {
            let Some(result) = result.filter(|_| parent.requires_grad()) else {
                continue;
            };
            debug_assert_eq!(result.shape(), parent.shape(), "{}", node.op);
            match self.by_id.get_mut(&parent.id()) {
                Some(sum) => sum.add_assign_same_shape(&result),
                None => {
                    self.by_id.insert(parent.id(), result);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::autodiff::{Tape, constant, parameter};
    use crate::error::TensorAutodiffError;
    use crate::tensor::Tensor;

    #[test]
    fn backward_needs_a_scalar_or_an_upstream_of_the_output_shape() {
        let w = parameter(&[2], &[1.0, 2.0]).unwrap();
        let y = w.scale(3.0).unwrap();
        let err = y.backward().unwrap_err();
        assert_eq!(
            err.to_string(),
            "backward: backward without an upstream adjoint needs one value but the output has shape [2]"
        );
        assert!(matches!(err, TensorAutodiffError::NotScalar { .. }));
        let err = y.backward_with(&Tensor::new(&[3], vec![1.0; 3]).unwrap()).unwrap_err();
        assert!(err.to_string().starts_with("backward: shapes [2] and [3]"), "{err}");
        // Σ upstream ⊙ (3w): ∂/∂w = 3·upstream
        let g = y.backward_with(&Tensor::new(&[2], vec![0.5, -1.0]).unwrap()).unwrap();
        assert_eq!(g.get(&w).unwrap().as_slice(), &[1.5, -3.0]);
    }

    #[test]
    fn a_released_value_needed_by_a_backward_rule_is_a_typed_error() {
        let w = parameter(&[2], &[1.0, 2.0]).unwrap();
        let y = w.mul(&w).unwrap().sum().unwrap();
        w.release(); // mul's backward needs w's value
        let err = y.backward().unwrap_err();
        assert!(matches!(err, TensorAutodiffError::Released { op: "mul", .. }), "{err}");
        assert_eq!(err.to_string(), "mul: the value made by parameter was released and cannot be read");
        // a rule that needs only shapes still works after release
        let v = parameter(&[2], &[1.0, 2.0]).unwrap();
        let s = v.scale(2.0).unwrap().sum().unwrap();
        v.release();
        assert_eq!(s.backward().unwrap().get(&v).unwrap().as_slice(), &[2.0, 2.0]);
    }

    #[test]
    fn the_tape_is_in_creation_order_and_checks_finiteness() {
        let a = parameter(&[1], &[1.0]).unwrap();
        let b = a.scale(f64::INFINITY).unwrap();
        let c = b.add(&a).unwrap();
        let tape = Tape::of(&c);
        assert_eq!(tape.len(), 3);
        assert!(tape.nodes().windows(2).all(|w| w[0].id() < w[1].id()));
        assert!(!tape.all_finite());
        assert!(Tape::of(&a.scale(2.0).unwrap()).all_finite());
        // constants keep no links: their tape is the value alone
        let k = constant(&[1], &[1.0]).unwrap().scale(2.0).unwrap();
        assert_eq!(Tape::of(&k).len(), 1);
    }

    #[test]
    fn a_product_adds_its_adjoint_onto_the_sum_in_place_and_leaves_shared_values_alone() {
        // z = x + x·W: the sum node hands x the upstream adjoint U itself (shared storage); the
        // product then adds U·Wᵀ onto that sum, which must copy it rather than change U
        let x = parameter(&[2, 2], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let w = parameter(&[2, 2], &[0.5, -1.0, 2.0, 0.25]).unwrap();
        let z = x.add(&x.matmul(&w).unwrap()).unwrap();
        let upstream = Tensor::new(&[2, 2], vec![1.0, -2.0, 0.5, 3.0]).unwrap();
        let kept = upstream.clone();
        let g = z.backward_with(&upstream).unwrap();
        assert_eq!(upstream.as_slice(), kept.as_slice());
        // dx = U + U·Wᵀ: rows [1 −2]·Wᵀ = [0.5·1 + (−1)(−2), 2·1 + 0.25·(−2)] = [2.5, 1.5], and
        // [0.5 3]·Wᵀ = [0.25 − 3, 1 + 0.75] = [−2.75, 1.75]
        assert_eq!(g.get(&x).unwrap().as_slice(), &[3.5, -0.5, -2.25, 4.75]);
        // dW = xᵀ·U
        assert_eq!(g.get(&w).unwrap().as_slice(), &[2.5, 7.0, 4.0, 8.0]);
    }

    #[test]
    fn leaves_can_be_assigned_but_not_reshaped_and_ops_cannot_be_assigned() {
        let w = parameter(&[2], &[1.0, 2.0]).unwrap();
        w.set_value(Tensor::new(&[2], vec![3.0, 4.0]).unwrap()).unwrap();
        assert_eq!(w.value().unwrap().as_slice(), &[3.0, 4.0]);
        let err = w.set_value(Tensor::new(&[3], vec![0.0; 3]).unwrap()).unwrap_err();
        assert!(err.to_string().starts_with("set_value: shapes [2] and [3]"), "{err}");
        let y = w.scale(2.0).unwrap();
        assert!(matches!(
            y.set_value(Tensor::new(&[2], vec![0.0; 2]).unwrap()),
            Err(TensorAutodiffError::InvalidArgument { .. })
        ));
    }
}
