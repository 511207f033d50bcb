// The pod sandbox's pause process for e2e/k8s (containerd's sandbox_image), built statically
// by scripts/install-k8s.sh so that no registry image is needed. It holds the pod's namespaces,
// reaps orphaned children (it is PID 1 when the pod shares its PID namespace) and exits on
// SIGINT/SIGTERM.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void Stop(int sig) {
  (void)sig;
  _exit(0);
}

static void Reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  if (getpid() != 1) fprintf(stderr, "pause: not PID 1\n");
  struct sigaction stop = {.sa_handler = Stop};
  struct sigaction reap = {.sa_handler = Reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &reap, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
