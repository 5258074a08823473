//! Per-command-buffer state a driver keeps between the executes of a buffer recorded against
//! binding slots (see [`DeviceBackend::prepare_bound`](crate::driver::DeviceBackend::prepare_bound)).

use std::any::Any;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// A slot, set at most once, that lives as long as its command buffer: the first execute stores
/// what later executes reuse (CUDA keeps the instantiated graph there).
#[derive(Default)]
pub struct BindingState {
    slot: OnceLock<Arc<dyn Any + Send + Sync>>,
}

impl BindingState {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the slot holds, if it holds a `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.slot.get().and_then(|value| value.clone().downcast::<T>().ok())
    }

    /// Stores `value` unless the slot is already set (two first executes racing), and returns
    /// what it holds afterwards: `value`, or the winner's if that is a `T`.
    pub fn set<T: Any + Send + Sync>(&self, value: Arc<T>) -> Option<Arc<T>> {
        let stored = self.slot.get_or_init(|| value.clone() as Arc<dyn Any + Send + Sync>);
        stored.clone().downcast::<T>().ok()
    }
}

impl fmt::Debug for BindingState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BindingState").field("set", &self.slot.get().is_some()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_wins_and_is_typed() {
        let state = BindingState::new();
        assert!(state.get::<u32>().is_none());
        assert_eq!(state.set(Arc::new(7u32)).as_deref(), Some(&7));
        // A second set keeps the first value.
        assert_eq!(state.set(Arc::new(9u32)).as_deref(), Some(&7));
        assert_eq!(state.get::<u32>().as_deref(), Some(&7));
        // Another type reads as absent, never as a wrong cast.
        assert!(state.get::<u64>().is_none());
        assert!(state.set(Arc::new(1u64)).is_none());
    }
}
