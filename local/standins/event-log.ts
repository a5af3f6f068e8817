/**
 * A stand-in's own record of what happened on the wire, in order: each entry gets a sequence
 * number and a time. Tests and the chaos run read it over HTTP (`GET /events?since=SEQ`) to act
 * at a named moment (kill the runtime once a record's POST arrived) and to check invariants
 * afterwards from the stand-in's view rather than the code under test's. Bounded: the oldest
 * entries go first (`dropped` says how many).
 */
export type Logged<T> = T & { seq: number; t: number };

export interface EventLog<T> {
  push(event: T): void;
  /** Entries after `since` (0: all kept), and the sequence number to ask from next time. */
  since(since: number): { next: number; dropped: number; entries: Logged<T>[] };
  clear(): void;
}

export function eventLog<T extends object>(capacity = 200_000): EventLog<T> {
  let entries: Logged<T>[] = [];
  let seq = 0;
  let dropped = 0;
  return {
    push(event) {
      seq += 1;
      entries.push({ ...event, seq, t: Date.now() });
      if (entries.length > capacity * 1.1) {
        const cut = entries.length - capacity;
        dropped += cut;
        entries = entries.slice(cut);
      }
    },
    since(since) {
      // Entries are in seq order: find the first one after `since` by bisection.
      let lo = 0;
      let hi = entries.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if ((entries[mid] as Logged<T>).seq <= since) lo = mid + 1;
        else hi = mid;
      }
      return { next: seq, dropped, entries: entries.slice(lo) };
    },
    clear() {
      entries = [];
    },
  };
}
