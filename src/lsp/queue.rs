//! The bookkeeping of requests in both directions, once (rust-analyzer's `ReqQueue`): the
//! requests this side sent and waits to hear about, under ids it counts itself, and the
//! requests it received and still owes an answer, under the peer's ids.

use crate::rpc::RequestId;

/// Requests sent: each id (counting from 1) with what the sender needs to handle its answer.
/// A server has a few requests in flight at a time: a list, looked through (a `HashMap` would
/// bring a hash table's code for this one type).
pub struct Outgoing<T> {
    last: u64,
    pending: Vec<(u64, T)>,
}

impl<T> Default for Outgoing<T> {
    fn default() -> Outgoing<T> {
        Outgoing {
            last: 0,
            pending: Vec::new(),
        }
    }
}

impl<T> Outgoing<T> {
    /// The id for a request about to be sent; `data` is kept until its answer.
    pub fn register(&mut self, data: T) -> RequestId {
        self.last += 1;
        self.pending.push((self.last, data));
        RequestId::number(self.last)
    }

    /// What was kept for the request `id` answers; None for an id never sent, or answered.
    pub fn complete(&mut self, id: &RequestId) -> Option<T> {
        let id = id.as_u64()?;
        let i = self.pending.iter().position(|p| p.0 == id)?;
        Some(self.pending.swap_remove(i).1)
    }

    /// Forgets every request (the peer is gone), returning what was kept.
    pub fn drain(&mut self) -> Vec<(u64, T)> {
        std::mem::take(&mut self.pending)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u64, &T)> {
        self.pending.iter().map(|(id, t)| (id, t))
    }
}

/// Requests received and not answered yet, by the peer's id, each with what the receiver keeps
/// for it (where it was forwarded, for `$/cancelRequest` and routing the answer). A peer has a
/// handful pending at a time: a list, looked through.
pub struct Incoming<T> {
    pending: Vec<(RequestId, T)>,
}

impl<T> Default for Incoming<T> {
    fn default() -> Incoming<T> {
        Incoming {
            pending: Vec::new(),
        }
    }
}

impl<T> Incoming<T> {
    /// Records a request; false if one with that id is still pending (ids must be unique
    /// among a peer's unanswered requests).
    pub fn register(&mut self, id: RequestId, data: T) -> bool {
        if self.get(&id).is_some() {
            return false;
        }
        self.pending.push((id, data));
        true
    }

    pub fn get(&self, id: &RequestId) -> Option<&T> {
        self.pending.iter().find(|p| p.0 == *id).map(|p| &p.1)
    }

    /// The request `f` picks (by its id, or an answer coming back under the receiver's own
    /// token), taken out: it is answered.
    pub fn take(&mut self, f: impl Fn(&RequestId, &T) -> bool) -> Option<(RequestId, T)> {
        let i = self.pending.iter().position(|p| f(&p.0, &p.1))?;
        Some(self.pending.swap_remove(i))
    }

    /// Every request `f` picks, taken out (those of a connection that went, or all).
    pub fn take_all(&mut self, f: impl Fn(&RequestId, &T) -> bool) -> Vec<(RequestId, T)> {
        let (out, keep) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| f(&p.0, &p.1));
        self.pending = keep;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outgoing_ids_count_and_complete_once() {
        let mut q: Outgoing<&str> = Outgoing::default();
        let a = q.register("a");
        let b = q.register("b");
        assert_eq!((a.to_value(), b.to_value()), (json!(1), json!(2)));
        assert_eq!(q.complete(&b), Some("b"));
        assert_eq!(q.complete(&b), None);
        let s = RequestId::from_value(&json!("1")).unwrap();
        assert_eq!(q.complete(&s), None, "a string id is not ours");
        assert_eq!(q.drain(), vec![(1, "a")]);
    }

    #[test]
    fn incoming_ids_keep_their_wire_form() {
        let mut q: Incoming<u32> = Incoming::default();
        let one = RequestId::from_value(&json!(1)).unwrap();
        let one_s = RequestId::from_value(&json!("1")).unwrap();
        assert!(q.register(one.clone(), 10));
        assert!(
            q.register(one_s.clone(), 20),
            "1 and \"1\" are different ids"
        );
        assert!(
            !q.register(one.clone(), 30),
            "a duplicate pending id is refused"
        );
        assert_eq!(q.take(|_, v| *v == 20), Some((one_s, 20)));
        assert_eq!(q.get(&one), Some(&10));
        assert_eq!(q.take(|_, v| *v == 20), None, "answered once");
        assert!(q.register(RequestId::number(2), 40));
        assert_eq!(q.take_all(|id, _| *id == one), vec![(one.clone(), 10)]);
        assert_eq!(q.take_all(|_, _| true), vec![(RequestId::number(2), 40)]);
        assert_eq!(q.get(&one), None);
    }
}
