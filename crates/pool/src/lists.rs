//! Numbered lists of page ids with O(1) insert, remove and "take newest".
//!
//! Stands in for the kernel's intrusive `list_head`s (zsmalloc fullness
//! lists, zbud `unbuddied[]`, tri-page buckets). The newest member of a list
//! comes out first, like `list_add` + `list_first_entry`. Removal from the
//! middle swaps the last member into the hole, so order inside a list is only
//! approximately LIFO; nothing here depends on exact order.

/// Where an id currently sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Membership {
    list: u32,
    position: u32,
}

#[derive(Debug, Default)]
pub(crate) struct IdLists {
    lists: Vec<Vec<u32>>,
    membership: Vec<Option<Membership>>,
}

impl IdLists {
    pub(crate) fn new(list_count: usize) -> IdLists {
        IdLists {
            lists: vec![Vec::new(); list_count],
            membership: Vec::new(),
        }
    }

    /// Adds `id` to `list`; `id` must not be in any list.
    pub(crate) fn push(&mut self, list: usize, id: u32) {
        let slot = id as usize;
        if self.membership.len() <= slot {
            self.membership.resize(slot + 1, None);
        }
        debug_assert!(self.membership[slot].is_none(), "id {id} already listed");
        let members = &mut self.lists[list];
        self.membership[slot] = Some(Membership {
            list: list as u32,
            position: members.len() as u32,
        });
        members.push(id);
    }

    /// Removes `id` from whichever list holds it; returns that list.
    pub(crate) fn remove(&mut self, id: u32) -> Option<usize> {
        let Membership { list, position } = self.membership.get_mut(id as usize)?.take()?;
        let members = &mut self.lists[list as usize];
        members.swap_remove(position as usize);
        if let Some(&moved) = members.get(position as usize) {
            if let Some(entry) = self.membership[moved as usize].as_mut() {
                entry.position = position;
            }
        }
        Some(list as usize)
    }

    /// The newest member of `list`, without removing it.
    pub(crate) fn newest(&self, list: usize) -> Option<u32> {
        self.lists[list].last().copied()
    }

    /// The list currently holding `id`.
    pub(crate) fn list_of(&self, id: u32) -> Option<usize> {
        self.membership
            .get(id as usize)
            .copied()
            .flatten()
            .map(|m| m.list as usize)
    }

    pub(crate) fn len(&self, list: usize) -> usize {
        self.lists[list].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_from_middle_keeps_others_findable() {
        let mut lists = IdLists::new(2);
        for id in [4, 7, 9] {
            lists.push(1, id);
        }
        assert_eq!(lists.newest(1), Some(9));
        assert_eq!(lists.remove(4), Some(1));
        assert_eq!(lists.remove(4), None);
        assert_eq!(lists.list_of(9), Some(1));
        assert_eq!(lists.remove(9), Some(1));
        assert_eq!(lists.newest(1), Some(7));
        assert_eq!(lists.len(1), 1);
        assert_eq!(lists.len(0), 0);
    }
}
