import { CaptchaError, type StopClassError } from '../common/errors.js';
import type { PipelineState } from '../pipeline/control.js';
import { type ApiKeySource, withFreshKeyOnStop } from '../pipeline/secret.js';
import { CaptchaAiClient, type CaptchaAiClientOptions, type SolveOptions } from './client.js';
import type { CaptchaTask, SolveResult, ThreadsInfo } from './types.js';

/**
 * A CaptchaAI client that follows key rotation: the worker, the cap adjuster and
 * `threadgate resume` all go through it, so they obey one rule.
 * - The key comes from an ApiKeySource (re-read after its max age).
 * - A pause or a resume is when an operator rotates the key, so a change of the pipeline
 *   state (`noteState`) drops the cached key: after `threadgate resume` no call goes out
 *   with the key that was cached before it.
 * - A stop-class answer makes it read the secret again; if the key changed, the call runs once
 *   more with the new key instead of failing. A solve is repeated only when its stop came
 *   before any task existed (at in.php): a task created with the old key may still hold a
 *   plan thread, and a second task beside it would break the slot rule.
 */
export class RotatingCaptchaAiClient {
  readonly #keys: ApiKeySource;
  readonly #options: Omit<CaptchaAiClientOptions, 'apiKey'>;
  #client: { key: string; client: CaptchaAiClient } | undefined;
  #stateMarker: string | undefined;
  #seenState = false;

  constructor(keys: ApiKeySource, options: Omit<CaptchaAiClientOptions, 'apiKey'> = {}) {
    this.#keys = keys;
    this.#options = options;
  }

  /** Tells the client the pipeline state just read; a changed state drops the cached key. */
  noteState(state: Pick<PipelineState, 'paused' | 'since'>): void {
    const marker = `${state.paused}|${state.since ?? ''}`;
    if (this.#seenState && marker === this.#stateMarker) return;
    // The first state seen also drops it: the key may have been read before this instance knew any.
    this.#seenState = true;
    this.#stateMarker = marker;
    this.#keys.forget();
  }

  async solve(task: CaptchaTask, o: SolveOptions = {}): Promise<SolveResult> {
    // A record's attempts count every in.php call, the old key's included.
    let calls = 0;
    let firstSubmits = 0;
    const total = (submits: number) => (calls > 1 ? submits + firstSubmits : submits);
    try {
      const result = await withFreshKeyOnStop(
        this.#keys,
        (key) => {
          calls += 1;
          const onSubmitted = o.onSubmitted;
          return this.#clientFor(key).solve(
            task,
            onSubmitted ? { ...o, onSubmitted: (id, submits) => onSubmitted(id, total(submits)) } : o,
          );
        },
        (err: StopClassError) => {
          firstSubmits = err.submits ?? 0;
          return err.taskId === undefined;
        },
      );
      return { ...result, submits: total(result.submits) };
    } catch (err) {
      if (err instanceof CaptchaError && err.submits !== undefined) err.submits = total(err.submits);
      throw err;
    }
  }

  threadsInfo(o: { signal?: AbortSignal } = {}): Promise<ThreadsInfo> {
    return withFreshKeyOnStop(this.#keys, (key) => this.#clientFor(key).threadsInfo(o));
  }

  #clientFor(key: string): CaptchaAiClient {
    if (this.#client?.key !== key) {
      this.#client = { key, client: new CaptchaAiClient({ ...this.#options, apiKey: key }) };
    }
    return this.#client.client;
  }
}
