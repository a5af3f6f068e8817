import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { jobJsonSchema } from './job-schema.js';

/** `npm run schema`: regenerates schema/job.schema.json from the zod source, and the Python package's copy. */
export const JOB_SCHEMA_PATH = fileURLToPath(new URL('../../schema/job.schema.json', import.meta.url));
/** The copy the Python producer package ships and validates with. */
export const PYTHON_SCHEMA_PATH = fileURLToPath(
  new URL('../../python/threadgate_producer/job.schema.json', import.meta.url),
);

export function renderJobSchema(): string {
  return `${JSON.stringify(jobJsonSchema(), null, 2)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  for (const path of [JOB_SCHEMA_PATH, PYTHON_SCHEMA_PATH]) {
    writeFileSync(path, renderJobSchema());
    process.stdout.write(`wrote ${path}\n`);
  }
}
