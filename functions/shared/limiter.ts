/**
 * A small async semaphore: at most `size` functions run at once, the rest wait in FIFO order.
 * The size can change while work runs; lowering it never interrupts running work, it only
 * holds back new starts until fewer than `size` are running (size 0 pauses).
 */
export class Limiter {
  #size: number;
  #active = 0;
  readonly #waiting: Array<{ start: () => void }> = [];

  constructor(size: number) {
    this.#size = checkSize(size);
  }

  get size(): number {
    return this.#size;
  }

  /** Functions running now. */
  get active(): number {
    return this.#active;
  }

  /** Functions waiting for a slot. */
  get pending(): number {
    return this.#waiting.length;
  }

  resize(size: number): void {
    this.#size = checkSize(size);
    this.#drain();
  }

  /**
   * Runs `fn` once a slot is free and resolves or rejects with its result. An abort while
   * waiting rejects with the signal's reason without running `fn`.
   */
  run<T>(fn: () => Promise<T>, o: { signal?: AbortSignal } = {}): Promise<T> {
    const { signal } = o;
    return new Promise<T>((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const onAbort = () => {
        const i = this.#waiting.indexOf(entry);
        if (i >= 0) {
          this.#waiting.splice(i, 1);
          reject(signal?.reason);
        }
      };
      const entry = {
        start: () => {
          signal?.removeEventListener('abort', onAbort);
          this.#active += 1;
          let result: Promise<T>;
          try {
            result = Promise.resolve(fn());
          } catch (err) {
            result = Promise.reject(err);
          }
          result.then(resolve, reject).finally(() => {
            this.#active -= 1;
            this.#drain();
          });
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(entry);
      this.#drain();
    });
  }

  #drain(): void {
    while (this.#active < this.#size && this.#waiting.length > 0) {
      this.#waiting.shift()?.start();
    }
  }
}

function checkSize(size: number): number {
  if (!Number.isInteger(size) || size < 0)
    throw new RangeError(`limiter size must be an integer >= 0, got ${size}`);
  return size;
}
