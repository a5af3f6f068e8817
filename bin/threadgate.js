#!/usr/bin/env node
// Entry point for `npx threadgate` from a checkout: run the TypeScript CLI through tsx,
// so there is no build step between editing the code and running it.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../cli/main.ts');
await main(process.argv);
