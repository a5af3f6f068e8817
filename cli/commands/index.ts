import type { Command } from 'commander';
import { registerSolveCommand } from './solve.js';
import { registerStandinCommand } from './standin.js';
import { registerThreadsCommand } from './threads.js';

/**
 * Every sub-command lives in its own file in this folder and exports a `register…` function;
 * this list is the one place that wires them into the program.
 */
export function registerCommands(program: Command): void {
  void program;
  registerSolveCommand(program);
  registerThreadsCommand(program);
  registerStandinCommand(program);
}
