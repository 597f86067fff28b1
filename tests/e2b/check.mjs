// Exit 77 (ctest: skipped) with the reason when this host cannot run kiln's
// sandboxes; a broken `kiln doctor` throws (exit 1), it never skips.
import { sandboxMissing } from './harness.mjs';

const why = sandboxMissing();
if (why) {
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
