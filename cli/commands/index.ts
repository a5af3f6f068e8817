import type { Command } from 'commander';
import { registerBench } from './bench.js';
import { registerEnqueue } from './enqueue.js';
import { registerLocal } from './local.js';
import { registerOutcomes } from './outcomes.js';
import { registerPause } from './pause.js';
import { registerRedrive } from './redrive.js';
import { registerResume } from './resume.js';
import { registerSecret } from './secret.js';
import { registerSolveCommand } from './solve.js';
import { registerStandinCommand } from './standin.js';
import { registerStatus } from './status.js';
import { registerThreadsCommand } from './threads.js';
import { registerWait } from './wait.js';

/**
 * Every sub-command lives in its own file in this folder and exports a `register…` function;
 * this list is the one place that wires them into the program.
 */
export function registerCommands(program: Command): void {
  void program;
  registerSolveCommand(program);
  registerThreadsCommand(program);
  registerStandinCommand(program);
  registerEnqueue(program);
  registerStatus(program);
  registerOutcomes(program);
  registerWait(program);
  registerPause(program);
  registerResume(program);
  registerRedrive(program);
  registerSecret(program);
  registerBench(program);
  registerLocal(program);
}
