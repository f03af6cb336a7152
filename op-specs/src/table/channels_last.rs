//! Activations kept channels-last (`[N, d.., C]` for ONNX's `[N, C, d..]`) between the ops that
//! prefer them (see [`Layout`](super::spec::Layout)): the permutations both ways, and the record,
//! per lowering, of which channels-first array has which channels-last form.

use mlx_kernels::{ops, Array, Stream};

use super::lower::{Result, SharedDerivations};

/// The tag of the forms recorded in a lowering's [`SharedDerivations`].
pub(super) const FORM: &str = "channels-last form";

/// Axes taking `[N, C, d..]` to `[N, d.., C]`.
pub fn to_last_axes(rank: usize) -> Vec<i32> {
    std::iter::once(0)
        .chain(2..rank as i32)
        .chain(std::iter::once(1))
        .collect()
}

/// Axes taking `[N, d.., C]` back to `[N, C, d..]`.
pub fn to_first_axes(rank: usize) -> Vec<i32> {
    std::iter::once(0)
        .chain(std::iter::once(rank as i32 - 1))
        .chain(1..rank as i32 - 1)
        .collect()
}

/// `x` channels-last (a lazy transpose).
pub fn to_channels_last(x: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::transpose(x, &to_last_axes(x.ndim()), s)?)
}

/// `x` channels-first again (a lazy transpose: nothing copies it unless an op needs it so).
pub fn to_channels_first(x: &Array, s: &Stream) -> Result<Array> {
    Ok(ops::transpose(x, &to_first_axes(x.ndim()), s)?)
}

/// `last` as the answer of a node: its channels-first view, recorded in `forms` as having
/// `last` as its channels-last form, so that the next node that prefers it reads `last`.
pub fn answer_from_channels_last(
    last: Array,
    forms: Option<&std::cell::RefCell<SharedDerivations>>,
    s: &Stream,
) -> Result<Array> {
    let first = to_channels_first(&last, s)?;
    if let Some(forms) = forms {
        forms.borrow_mut().record(FORM, &[&first], &[], last);
    }
    Ok(first)
}

/// The channels-last form of `first` recorded in `forms`, if any.
pub fn recorded_form(
    forms: Option<&std::cell::RefCell<SharedDerivations>>,
    first: &Array,
) -> Option<Array> {
    forms?.borrow().channels_last_of(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_permutations_undo_each_other() {
        assert_eq!(to_last_axes(4), [0, 2, 3, 1]);
        assert_eq!(to_first_axes(4), [0, 3, 1, 2]);
        assert_eq!(to_last_axes(3), [0, 2, 1]);
        assert_eq!(to_first_axes(5), [0, 4, 1, 2, 3]);
    }

    #[test]
    fn rows_marked_for_channels_last_fit_what_the_plan_does_with_them() {
        use crate::table::spec::Layout;
        for spec in crate::all() {
            match spec.layout {
                // The plan permutes every operand alike: no attribute may name an axis, and
                // there is one answer to answer channels-first.
                Layout::Elementwise => {
                    assert_eq!(spec.outputs.len(), 1, "{}", spec.op);
                    for attr in spec.attributes {
                        assert!(
                            !attr.name.contains("axis") && !attr.name.contains("axes"),
                            "{}",
                            spec.op
                        );
                    }
                }
                // The form looked up is the first input's: activations, `X`.
                Layout::ChannelsLast => assert_eq!(spec.inputs[0].name, "X", "{}", spec.op),
                Layout::ChannelsFirst => {}
            }
        }
        let marked = |layout| crate::all().iter().filter(|s| s.layout == layout).count();
        assert!(marked(Layout::Elementwise) >= 20 && marked(Layout::ChannelsLast) >= 4);
    }

    #[test]
    fn an_answer_made_channels_last_is_found_by_its_channels_first_view() {
        let s = Stream::cpu().unwrap();
        let forms = std::cell::RefCell::new(SharedDerivations::default());
        let last = Array::from_slice(&[1f32, 2., 3., 4., 5., 6.], &[1, 3, 2]).unwrap();
        let first = answer_from_channels_last(last.clone(), Some(&forms), &s).unwrap();
        assert_eq!(first.shape(), [1, 2, 3]);
        assert_eq!(first.to_vec::<f32>(&s).unwrap(), [1., 3., 5., 2., 4., 6.]);
        let found = recorded_form(Some(&forms), &first).expect("recorded");
        assert_eq!(found.id(), last.id());
        assert!(recorded_form(Some(&forms), &last).is_none());
        assert!(recorded_form(None, &first).is_none());
    }
}
