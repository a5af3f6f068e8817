import { READY_LINE, type RuntimeProcessOptions } from './child-process.js';
import { LocalRuntime } from './local-runtime.js';

/**
 * Entry point of the runtime child process (local/runtime/child-process.ts): reads its options as one
 * JSON line on stdin, starts the local runtime, prints the ready line, and stops cleanly when
 * stdin closes or on SIGTERM. A SIGKILL leaves everything as it is, which is the point.
 */
function readOptions(): Promise<RuntimeProcessOptions> {
  // A 'data' listener rather than `for await`: leaving that loop would destroy stdin, and its
  // closing is the signal to stop.
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer) => {
      text += chunk.toString('utf8');
      const end = text.indexOf('\n');
      if (end < 0) return;
      process.stdin.off('data', onData);
      process.stdin.off('end', onEnd);
      resolve(JSON.parse(text.slice(0, end)) as RuntimeProcessOptions);
    };
    const onEnd = () => reject(new Error('stdin closed before the runtime options arrived'));
    process.stdin.on('data', onData);
    process.stdin.on('end', onEnd);
  });
}

const options = await readOptions();
const runtime = await LocalRuntime.start({
  ...options,
  onEvent: (event) => {
    if (event.type === 'error') process.stderr.write(`runtime error in ${event.where}\n`);
  },
});
process.stdout.write(`${READY_LINE}\n`);

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await runtime.stop().catch(() => undefined);
  process.exit(0);
}
process.stdin.on('end', () => void stop());
process.stdin.on('close', () => void stop());
process.stdin.resume();
process.on('SIGTERM', () => void stop());
