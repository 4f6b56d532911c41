//! The bookkeeping of requests in both directions, once (rust-analyzer's `ReqQueue`): the
//! requests this side sent and waits to hear about, under ids it counts itself, and the
//! requests it received and still owes an answer, under the peer's ids.

use std::collections::HashMap;

use crate::rpc::RequestId;

/// Requests sent: each id (counting from 1) with what the sender needs to handle its answer.
pub struct Outgoing<T> {
    last: u64,
    pending: HashMap<u64, T>,
}

impl<T> Default for Outgoing<T> {
    fn default() -> Outgoing<T> {
        Outgoing {
            last: 0,
            pending: HashMap::new(),
        }
    }
}

impl<T> Outgoing<T> {
    /// The id for a request about to be sent; `data` is kept until its answer.
    pub fn register(&mut self, data: T) -> RequestId {
        self.last += 1;
        self.pending.insert(self.last, data);
        RequestId::number(self.last)
    }

    /// What was kept for the request `id` answers; None for an id never sent, or answered.
    pub fn complete(&mut self, id: &RequestId) -> Option<T> {
        self.pending.remove(&id.as_u64()?)
    }

    /// Forgets every request (the peer is gone), returning what was kept.
    pub fn drain(&mut self) -> Vec<(u64, T)> {
        self.pending.drain().collect()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&u64, &T)> {
        self.pending.iter()
    }
}

/// Requests received and not answered yet, by the peer's id, each with what the receiver keeps
/// for it (where it was forwarded, for `$/cancelRequest` and routing the answer).
pub struct Incoming<T> {
    pending: HashMap<RequestId, T>,
}

impl<T> Default for Incoming<T> {
    fn default() -> Incoming<T> {
        Incoming {
            pending: HashMap::new(),
        }
    }
}

impl<T> Incoming<T> {
    /// Records a request; false if one with that id is still pending (ids must be unique
    /// among a peer's unanswered requests).
    pub fn register(&mut self, id: RequestId, data: T) -> bool {
        if self.pending.contains_key(&id) {
            return false;
        }
        self.pending.insert(id, data);
        true
    }

    /// The request is answered (or cancelled): what was kept for it, once.
    pub fn complete(&mut self, id: &RequestId) -> Option<T> {
        self.pending.remove(id)
    }

    pub fn get(&self, id: &RequestId) -> Option<&T> {
        self.pending.get(id)
    }

    pub fn drain(&mut self) -> Vec<(RequestId, T)> {
        self.pending.drain().collect()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Both directions of one connection.
pub struct ReqQueue<I, O> {
    pub incoming: Incoming<I>,
    pub outgoing: Outgoing<O>,
}

impl<I, O> Default for ReqQueue<I, O> {
    fn default() -> ReqQueue<I, O> {
        ReqQueue {
            incoming: Incoming::default(),
            outgoing: Outgoing::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outgoing_ids_count_and_complete_once() {
        let mut q: ReqQueue<(), &str> = ReqQueue::default();
        let a = q.outgoing.register("a");
        let b = q.outgoing.register("b");
        assert_eq!((a.to_value(), b.to_value()), (json!(1), json!(2)));
        assert_eq!(q.outgoing.complete(&b), Some("b"));
        assert_eq!(q.outgoing.complete(&b), None);
        let s = RequestId::from_value(&json!("1")).unwrap();
        assert_eq!(q.outgoing.complete(&s), None, "a string id is not ours");
        assert_eq!(q.outgoing.drain(), vec![(1, "a")]);
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
        assert_eq!(q.complete(&one_s), Some(20));
        assert_eq!(q.get(&one), Some(&10));
        assert_eq!(q.len(), 1);
    }
}
