#!/usr/bin/env node
// The `threadgate` program. In a checkout (cli/main.ts is here) it runs the TypeScript sources
// through tsx, a development dependency, so there is no build step between editing the code and
// running it; in the installed package (no sources) it runs the compiled code in dist/.
import { existsSync } from 'node:fs';

const source = new URL('../cli/main.ts', import.meta.url);
let main;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import(source.href));
} else {
  ({ main } = await import('../dist/cli/main.js'));
}
await main(process.argv);
