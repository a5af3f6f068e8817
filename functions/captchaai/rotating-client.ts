import { StopClassError } from '../common/errors.js';
import type { PipelineState } from '../pipeline/control.js';
import { type ApiKeySource, withFreshKeyOnStop } from '../pipeline/secret.js';
import {
  CaptchaAiClient,
  type CaptchaAiClientOptions,
  freshSolveBudget,
  type SolveOptions,
} from './client.js';
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
 *   plan thread, and a second task beside it would break the slot rule. The repeated call
 *   continues the first one's budget (SolveOptions.budget): no third task, no second set of retries.
 * - A key refused stop-class is not sent again while no new key is stored and the pipeline state
 *   has not changed: every later record of the environment meets the stop without an in.php.
 */
export class RotatingCaptchaAiClient {
  readonly #keys: ApiKeySource;
  readonly #options: Omit<CaptchaAiClientOptions, 'apiKey'>;
  #client: { key: string; client: CaptchaAiClient } | undefined;
  #stateMarker: string | undefined;
  #seenState = false;
  /** The last key CaptchaAI refused stop-class, until the pipeline state changes. */
  #refused: { key: string; code: string; message: string } | undefined;

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
    // A pause or a resume: the operator acted, so a refused key is asked about again.
    this.#refused = undefined;
  }

  async solve(task: CaptchaTask, o: SolveOptions = {}): Promise<SolveResult> {
    // One budget for the record whichever key runs it: a call repeated with a rotated key continues
    // the first one's retries, submits and resubmission (functions/worker/worst-case.ts counts it so).
    const budget = o.budget ?? freshSolveBudget();
    return withFreshKeyOnStop(
      this.#keys,
      (key) => {
        const refused = this.#refused;
        if (refused?.key === key) {
          // This key was refused stop-class and no new one is stored: the answer is known, so no
          // in.php goes out with it again (the record meets the stop and tries the pause itself).
          throw new StopClassError(refused.code, `${refused.message} (seen earlier; not sent again)`, {
            submits: budget.submits,
          });
        }
        return this.#clientFor(key)
          .solve(task, { ...o, budget })
          .catch((err: unknown) => {
            if (err instanceof StopClassError) this.#refused = { key, code: err.code, message: err.message };
            throw err;
          });
      },
      (err: StopClassError) => err.taskId === undefined,
    );
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
