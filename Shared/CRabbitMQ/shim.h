#ifndef SYNCLINE_CRABBITMQ_SHIM_H
#define SYNCLINE_CRABBITMQ_SHIM_H
#include <sys/time.h>
#include <poll.h>
#include <sys/eventfd.h>
#if __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/framing.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#endif

/* A non-blocking eventfd that wakes a thread waiting in poll(). */
static inline int syncline_wake_fd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

/* amqp_login is C-variadic; Swift cannot call it directly. */
static inline amqp_rpc_reply_t syncline_amqp_login_plain(
    amqp_connection_state_t state, const char *vhost, int channel_max, int frame_max,
    int heartbeat, const char *user, const char *password) {
    return amqp_login(state, vhost, channel_max, frame_max, heartbeat,
                      AMQP_SASL_METHOD_PLAIN, user, password);
}
#endif
