//! Named parameters: a stable dotted name (`attention.query.weight`) for every trainable leaf.

use std::collections::BTreeMap;

use crate::autodiff::{Gradients, TensorValue};
use crate::nn::NnError;

/// A parameter leaf with its stable dotted name.
#[derive(Clone, Debug)]
pub struct NamedParameter {
    name: String,
    value: TensorValue,
}

impl NamedParameter {
    /// Names a parameter leaf.
    pub fn new(name: impl Into<String>, value: TensorValue) -> Self {
        Self { name: name.into(), value }
    }

    /// The dotted name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parameter leaf.
    pub fn value(&self) -> &TensorValue {
        &self.value
    }
}

/// An ordered list of parameters with unique names and unique nodes.
#[derive(Clone, Debug, Default)]
pub struct NamedParameters {
    list: Vec<NamedParameter>,
}

impl NamedParameters {
    /// Checks and keeps `list` in its order.
    ///
    /// # Errors
    /// [`NnError::DuplicateParameterName`] if two entries share a name;
    /// [`NnError::DuplicateParameterNode`] if the same node is listed twice (its update would be
    /// applied twice).
    pub fn try_new(list: Vec<NamedParameter>) -> Result<Self, NnError> {
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut nodes: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, p) in list.iter().enumerate() {
            if let Some(&first) = names.get(p.name()) {
                return Err(NnError::DuplicateParameterName { name: p.name.clone(), first, second: i });
            }
            if let Some(&first) = nodes.get(&p.value.id()) {
                return Err(NnError::DuplicateParameterNode {
                    node: p.value.id(),
                    first_name: list[first].name.clone(),
                    second_name: p.name.clone(),
                });
            }
            names.insert(p.name(), i);
            nodes.insert(p.value.id(), i);
        }
        Ok(Self { list })
    }

    /// The parameters in order.
    pub fn iter(&self) -> impl Iterator<Item = &NamedParameter> {
        self.list.iter()
    }

    /// Number of parameters (tensors, not scalars).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// `true` when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The parameter with this name.
    pub fn get(&self, name: &str) -> Option<&NamedParameter> {
        self.list.iter().find(|p| p.name == name)
    }

    /// Total number of scalars.
    pub fn scalar_count(&self) -> usize {
        self.list.iter().map(|p| p.value.len()).sum()
    }

    /// `(name, gradient)` for every parameter, zeros where no adjoint arrived.
    pub fn gradients<'a>(&'a self, grads: &'a Gradients) -> impl Iterator<Item = (&'a str, crate::Tensor)> + 'a {
        self.list.iter().map(|p| (p.name(), grads.get_or_zeros(&p.value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::parameter;

    #[test]
    fn duplicates_are_rejected_with_names() {
        let a = parameter(&[1], &[1.0]).unwrap();
        let b = parameter(&[1], &[2.0]).unwrap();
        let ok =
            NamedParameters::try_new(vec![NamedParameter::new("a", a.clone()), NamedParameter::new("b", b.clone())])
                .unwrap();
        assert_eq!((ok.len(), ok.scalar_count()), (2, 2));
        let err = NamedParameters::try_new(vec![NamedParameter::new("w", a.clone()), NamedParameter::new("w", b)])
            .unwrap_err();
        assert_eq!(err.to_string(), "parameters: the name \"w\" appears twice (positions 0 and 1)");
        assert!(matches!(err, NnError::DuplicateParameterName { first: 0, second: 1, .. }));
        let err = NamedParameters::try_new(vec![NamedParameter::new("x", a.clone()), NamedParameter::new("y", a)])
            .unwrap_err();
        assert!(matches!(err, NnError::DuplicateParameterNode { .. }));
        assert!(err.to_string().contains("\"x\" and \"y\" are the same node"), "{err}");
    }
}
