import { type BatchCancel, CancelUnknownError } from '../records/cancellations.js';

/**
 * How fresh a batch's cancel state must be when the worker acts on it, at time scale 1: this is
 * the cancel's propagation bound (docs/design.md invariant 8). A record claimed more than this
 * long after `threadgate cancel` returned never reaches in.php, and a record whose answer arrives
 * later is not posted. Each execution environment reads a batch's state at most once per period
 * (one strongly consistent GetItem, and only for records that carry a batch_id), so a busy gate
 * pays about cap ÷ 10 reads a second per batch in flight, not one per record.
 */
export const CANCEL_REFRESH_MS = 10_000;
/** The bound never goes below this at small time scales, so a fast test does not read per record. */
export const MIN_CANCEL_REFRESH_MS = 1_000;

/** The bound at a time scale (see CANCEL_REFRESH_MS). */
export function cancelRefreshMs(timeScale: number): number {
  return Math.max(MIN_CANCEL_REFRESH_MS, CANCEL_REFRESH_MS * timeScale);
}

interface Entry {
  cancel: BatchCancel | undefined;
  /** When the read that gave `cancel` started (epoch ms): the state is at least that fresh. */
  readAt: number;
}

/**
 * One execution environment's view of batch cancels: cached per batch for `refreshMs`. A cancel,
 * once seen, is kept for good (a cancel is final); "not cancelled" is read again once it is older
 * than `refreshMs`. Concurrent asks for one batch share one read. A read that fails is reported,
 * and the ask is answered by the last successful read only while that one is within the bound;
 * otherwise the state is unknown and the ask rejects with CancelUnknownError (never "not
 * cancelled": a throttled read right after a cancel must not let a record reach in.php or the
 * form). The next ask reads again.
 */
export class CancelWatch {
  readonly #entries = new Map<string, Entry>();
  readonly #reads = new Map<string, { startedAt: number; answer: Promise<BatchCancel | undefined> }>();

  constructor(
    private readonly o: {
      read: (batchId: string) => Promise<BatchCancel | undefined>;
      refreshMs: number;
      now: () => number;
      onReadFailed?: (batchId: string, err: unknown) => void;
    },
  ) {}

  /**
   * The batch's cancel as of at most `refreshMs` ago; rejects with CancelUnknownError when no read
   * of it has succeeded within that bound.
   */
  async cancelOf(batchId: string): Promise<BatchCancel | undefined> {
    const entry = this.#entries.get(batchId);
    if (entry?.cancel || (entry && this.o.now() - entry.readAt < this.o.refreshMs)) return entry.cancel;
    // A read under way is shared only while it started within the bound: a slow read that began
    // before a cancel landed must not answer an ask made more than the bound after it.
    const now = this.o.now();
    const pending = this.#reads.get(batchId);
    if (pending && now - pending.startedAt < this.o.refreshMs) return pending.answer;
    const answer = this.#read(batchId);
    const read = { startedAt: now, answer };
    this.#reads.set(batchId, read);
    void answer
      .finally(() => {
        if (this.#reads.get(batchId) === read) this.#reads.delete(batchId);
      })
      .catch(() => undefined); // The asker handles the rejection; this copy must not be unhandled.
    return answer;
  }

  async #read(batchId: string): Promise<BatchCancel | undefined> {
    const readAt = this.o.now();
    try {
      const cancel = await this.o.read(batchId);
      const current = this.#entries.get(batchId);
      // Keep the newest answer: a slower, older read does not overwrite a later one.
      if (!current || current.readAt <= readAt || cancel) {
        this.#entries.set(batchId, {
          cancel: cancel ?? current?.cancel,
          readAt: Math.max(readAt, current?.readAt ?? 0),
        });
      }
      return cancel ?? current?.cancel;
    } catch (err) {
      this.o.onReadFailed?.(batchId, err);
      // A read that succeeded meanwhile, or the last one while it is within the bound, still answers.
      const known = this.#entries.get(batchId);
      if (known?.cancel || (known && this.o.now() - known.readAt < this.o.refreshMs)) return known.cancel;
      throw new CancelUnknownError(batchId, { cause: err });
    }
  }
}
