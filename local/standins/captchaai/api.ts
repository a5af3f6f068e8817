import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CaptchaType } from '../../../functions/captchaai/types.js';
import type { Faults } from './faults.js';
import { parseTask, send, sendAnswer } from './http.js';
import { drawSolveMs } from './latency.js';
import type { StandinModel, Task, TaskRequest } from './model.js';
import type { LatencyDistribution } from './types.js';
import { type LostAnswers, recordOfPageurl } from './wire.js';

/**
 * CaptchaAI's wire API over the model (like a moto `responses` module): in.php creates a task,
 * res.php `get` reads its answer, res.php `threadsinfo` reports the plan. Each request goes
 * through the same steps: count it, let the fault layer answer instead, check the key and the
 * parameters, then act on the model and answer in CaptchaAI's format.
 */

type Params = URLSearchParams;

export interface ApiOptions {
  model: StandinModel;
  faults: Faults;
  /** in.php answers lost after the task was created (wire.ts). */
  lost: LostAnswers;
  random: () => number;
  timeScale: number;
  /** Per-type solve latency (before the time scale). */
  latency: Record<CaptchaType, LatencyDistribution>;
  /** A never-finishing task releases its thread after this, already scaled. */
  abandonAfterMs: number;
  /** How in.php's JSON carries the task id: CaptchaAI sends both forms. */
  taskIdAs: 'string' | 'number' | 'mixed';
}

export class CaptchaApi {
  private readonly model: StandinModel;
  private readonly faults: Faults;
  private idCount = 0;

  constructor(private readonly o: ApiOptions) {
    this.model = o.model;
    this.faults = o.faults;
  }

  /** Counts an error answer and sends it, or sends a success. */
  private answer(res: ServerResponse, p: Params, ok: boolean, request: string | number): void {
    if (!ok) this.model.countError(String(request));
    sendAnswer(res, p, ok, request);
  }

  /** The fault layer's turn, then the key check. Returns true when the request was answered. */
  private async refused(
    endpoint: 'in.php' | 'res.php',
    req: IncomingMessage,
    res: ServerResponse,
    p: Params,
  ) {
    if (await this.faults.injectedReply(endpoint, req, res)) return true;
    if (await this.faults.infra(req, res, p)) return true;
    const badKey = this.model.keyError(p.get('key') ?? '');
    if (!badKey) return false;
    this.answer(res, p, false, badKey);
    return true;
  }

  async inPhp(req: IncomingMessage, res: ServerResponse, p: Params): Promise<void> {
    const parsed = parseTask(p);
    const { model } = this;
    model.countSubmit(p.get('pageurl'), 'type' in parsed ? parsed.type : undefined);
    const record = recordOfPageurl(p.get('pageurl') ?? '');
    const noTask = (error: string) =>
      model.wire.push({ kind: 'in.php', record, error, inFlight: model.inFlight });
    if (await this.refused('in.php', req, res, p)) return noTask('REFUSED');
    if ('error' in parsed) {
      noTask(parsed.error);
      return this.answer(res, p, false, parsed.error);
    }
    if (!model.hasFreeThread()) {
      noTask('ERROR_ZERO_BALANCE');
      return this.answer(res, p, false, 'ERROR_ZERO_BALANCE');
    }
    const task = this.startTask(parsed);
    const lost = this.o.lost.draw(record);
    model.wire.push({
      kind: 'in.php',
      record,
      taskId: task.id,
      inFlight: model.inFlight,
      ...(lost ? { lost } : {}),
    });
    this.idCount += 1;
    const { taskIdAs } = this.o;
    const asNumber = taskIdAs === 'number' || (taskIdAs === 'mixed' && this.idCount % 2 === 0);
    const reply = () => this.answer(res, p, true, asNumber ? Number(task.id) : task.id);
    if (!lost) return reply();
    // The task exists and holds its thread; only its answer is lost (wire.ts).
    model.countError(`LOST_${lost.toUpperCase()}`);
    await this.o.lost.deliver(lost, req, res, reply);
  }

  /** Creates the task and schedules how it ends: solved or unsolvable after its latency, or never. */
  private startTask(r: TaskRequest): Task {
    const { model, faults } = this;
    const task = model.createTask(r);
    if (faults.hit(faults.rates.neverFinish)) {
      // No answer ever; CaptchaAI eventually gives the thread back and reports the task unsolvable.
      model.endAfter(task, this.o.abandonAfterMs, 'unsolvable');
    } else {
      const outcome = faults.hit(faults.rates.unsolvable) ? 'unsolvable' : 'solved';
      model.endAfter(task, drawSolveMs(this.o.latency[r.type], this.o.random) * this.o.timeScale, outcome);
    }
    model.prune();
    return task;
  }

  async resPhp(req: IncomingMessage, res: ServerResponse, p: Params): Promise<void> {
    const action = p.get('action');
    if (action === 'threadsinfo') return this.threadsInfo(res, p);
    if (action !== 'get') return this.answer(res, p, false, 'ERROR_BAD_PARAMETERS');
    this.model.counters.polls += 1;
    if (await this.refused('res.php', req, res, p)) return;
    const task = this.model.task(p.get('id') ?? '');
    if (!task) return this.answer(res, p, false, 'ERROR_WRONG_CAPTCHA_ID');
    const answer = { pending: 'CAPCHA_NOT_READY', unsolvable: 'ERROR_CAPTCHA_UNSOLVABLE', solved: 'OK' }[
      task.state
    ];
    const record = recordOfPageurl(task.pageurl);
    this.model.wire.push({ kind: 'res.php', record, taskId: task.id, answer, inFlight: this.model.inFlight });
    if (task.state === 'pending') {
      if (p.get('json') === '1')
        send(res, 200, JSON.stringify({ status: 0, request: 'CAPCHA_NOT_READY' }), 'application/json');
      else send(res, 200, 'CAPCHA_NOT_READY', 'text/plain');
      return;
    }
    if (task.state === 'unsolvable') return this.answer(res, p, false, 'ERROR_CAPTCHA_UNSOLVABLE');
    this.answer(res, p, true, task.token ?? '');
  }

  private threadsInfo(res: ServerResponse, p: Params): void {
    const { model } = this;
    const badKey = model.keyError(p.get('key') ?? '');
    if (badKey) {
      this.answer(res, p, false, badKey);
      return;
    }
    // CaptchaAI's shape: threads as a string, working_threads as a number.
    const threads = String(model.planActive ? model.threads : 0);
    send(res, 200, JSON.stringify({ threads, working_threads: model.inFlight }), 'application/json');
  }
}
