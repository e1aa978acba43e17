//! Work a test hands a budget's reclaimer thread: run once, at the top of
//! its loop, on that thread (tests only).

use crate::shared::Shared;
use std::sync::Mutex;

type Hook = Box<dyn FnOnce(&Shared) + Send>;

/// Work for the reclaimer of the budget with this id.
static HOOKS: Mutex<Vec<(u64, Hook)>> = Mutex::new(Vec::new());

/// Runs the hooks left for `budget`'s reclaimer (on that thread).
pub(crate) fn run_hooks(budget: &Shared) {
    let mine: Vec<Hook> = {
        let mut hooks = HOOKS.lock().unwrap_or_else(|e| e.into_inner());
        let (mine, others) = std::mem::take(&mut *hooks)
            .into_iter()
            .partition(|(id, _)| *id == budget.id());
        *hooks = others;
        mine.into_iter().map(|(_, hook)| hook).collect()
    };
    for hook in mine {
        hook(budget);
    }
}

/// Leaves `hook` for `budget`'s reclaimer, and wakes it.
pub(crate) fn on_reclaimer_of(budget: &Shared, hook: impl FnOnce(&Shared) + Send + 'static) {
    HOOKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((budget.id(), Box::new(hook)));
    budget.kick_reclaimer();
}
