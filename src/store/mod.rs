//! Placeholder in the model worktree; the real store lives on main.
