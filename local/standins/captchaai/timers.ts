/**
 * The stand-in's timers: every solve, abandonment and delayed answer is scheduled here, so that
 * `close()` can cancel all of them at once.
 */
export class Timers {
  private readonly pending = new Set<NodeJS.Timeout>();

  /** Runs `fn` after `ms` unless the timers are cleared first. */
  later(ms: number, fn: () => void): NodeJS.Timeout {
    const t = setTimeout(() => {
      this.pending.delete(t);
      fn();
    }, ms);
    this.pending.add(t);
    return t;
  }

  delay(ms: number): Promise<void> {
    return new Promise((resolve) => this.later(ms, resolve));
  }

  clear(): void {
    for (const t of this.pending) clearTimeout(t);
    this.pending.clear();
  }
}
