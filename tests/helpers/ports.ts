export { freePort } from '../../cli/ports.js';
