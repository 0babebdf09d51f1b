//! A request's class (light or heavy), shared by the core (admission, lanes) and the metrics
//! (per-class families): a leaf, so that `metrics` need not import `core`. The policy that
//! classes requests is `core::admission`'s.

/// A request's class, and the lane its queries run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    Light,
    Heavy,
}

impl Class {
    pub const ALL: [Self; 2] = [Self::Light, Self::Heavy];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Light => "light",
            Self::Heavy => "heavy",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
